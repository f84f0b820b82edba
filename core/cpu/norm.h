// File: core/cpu/norm.h
// Batch normalization kernels: batch or running statistics, normalize, backward.
//
// N batch, C channels, M = N * (elements per channel per sample), the count a
// channel's statistics are taken over.
// x, y, dx, dy are (N, C, ...) with at least 2 dims and any strides (NCHW,
// channels-last, views); per-channel vectors (C) may have any stride. All share one
// float dtype. An absent weight or bias (nullopt) acts as 1 or 0. Sums accumulate
// in double.
#pragma once

#include <optional>

#include "core/kernel/norm.h"
#include "core/strided.h"

namespace loom::cpu {

// Training: save_mean (C) = batch mean, save_invstd (C) = 1 / sqrt(biased var + eps).
// Needs M >= 2; blends `running` when given.
void batch_norm_batch_stats(const Strided& save_mean, const Strided& save_invstd, const Strided& x,
                            double eps, const std::optional<kernel::RunningStats>& running);

// Eval: save_mean = running_mean, save_invstd = 1 / sqrt(running_var + eps).
void batch_norm_running_stats(const Strided& save_mean, const Strided& save_invstd,
                              const Strided& running_mean, const Strided& running_var, double eps);

// y = (x - mean) * invstd * weight + bias, per channel.
void batch_norm_forward(const Strided& y, const Strided& x, const Strided& mean,
                        const Strided& invstd, const std::optional<Strided>& weight,
                        const std::optional<Strided>& bias);

// Writes the gradients that are given. With xhat = (x - mean) * invstd:
//   dbias = sum dy,  dweight = sum dy * xhat   (sums over a channel's M elements)
//   training (mean, invstd came from x): dx = weight * invstd * (dy - (dbias + xhat dweight) / M)
//   eval (mean, invstd are constants):   dx = weight * invstd * dy
void batch_norm_backward(const std::optional<Strided>& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd,
                         const std::optional<Strided>& weight, bool training);

// The CPU side of batch_norm_relu, each one pass over the activations:
//   forward  y = max((x - mean) * invstd * weight + bias + residual, 0)
//   backward dpre = dy where y > 0, written to dresidual when given; then the
//            training backward above of dpre (dx, dweight, dbias).
// `residual` / `dresidual` may be absent; y, dy, dresidual share x's sizes.
void batch_norm_relu_forward(const Strided& y, const Strided& x, const Strided& mean,
                             const Strided& invstd, const std::optional<Strided>& weight,
                             const std::optional<Strided>& bias,
                             const std::optional<Strided>& residual);
void batch_norm_relu_backward(const Strided& dx, const Strided& dweight, const Strided& dbias,
                              const std::optional<Strided>& dresidual, const Strided& dy,
                              const Strided& x, const Strided& y, const Strided& mean,
                              const Strided& invstd, const Strided& weight);

}  // namespace loom::cpu
