// File: core/ops/fused_internal.h
// Fused ops that only fusion::Block's pieces call (core/ops/fusion.cc).
//
// N batch, C channels.
#pragma once

#include <vector>

#include "core/ops/activation.h"
#include "core/ops/norm.h"
#include "core/tensor.h"

namespace loom::fused_detail {

// batch_norm_activation(x + conv_bias) for a conv that left its (C) bias out,
// in training mode: the batch mean takes a per-channel constant out again, so
// y and the gradients of x, weight, bias and residual are
// batch_norm_activation(x)'s; the running mean moves toward the mean of
// x + conv_bias, and conv_bias gets the zero gradient it has in the one-by-one
// run (up to that run's rounding). The bias add over the conv's output and its
// broadcast-reduce backward go. ValueError outside training mode, or for a
// conv_bias that is not (C).
Tensor batch_norm_activation_absorbing_bias(const Tensor& x, const Tensor& conv_bias,
                                            const Tensor& running_mean, const Tensor& running_var,
                                            const Tensor& weight, const Tensor& bias, BatchNormOptions options,
                                            ActivationKind kind, const std::vector<double>& parameters,
                                            const Tensor& residual);

}  // namespace loom::fused_detail
