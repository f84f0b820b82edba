// File: core/cuda/norm.h
// Batch normalization on the GPU: the twins of core/cpu/norm.h, with the same
// signatures and formulas. Training runs through cuDNN graphs
// (core/cudnn/norm.h) where an engine exists; these kernels are the tier below.
//
// N batch, C channels, M = N * (elements per channel per sample).
// x, y, dx, dy are (N, C, ...) with at least 2 dims and any strides (NCHW,
// channels-last, views); per-channel vectors (C) may have any stride. All share
// one float dtype, except that bfloat16 / float16 x, y, dx, dy (GPU-only) take
// float32 per-channel vectors and compute in float32; an absent weight or bias
// acts as 1 or 0. The per-channel sums of the backward accumulate in the
// per-channel dtype (a block tree per channel).
#pragma once

#include <optional>

#include "core/kernel/norm.h"
#include "core/strided.h"

namespace loom::cuda {

// save_mean = running_mean, save_invstd = 1 / sqrt(running_var + eps) (in double).
void batch_norm_running_stats(const Strided& save_mean, const Strided& save_invstd,
                              const Strided& running_mean, const Strided& running_var, double eps);

// y = (x - mean) * invstd * weight + bias, per channel.
void batch_norm_forward(const Strided& y, const Strided& x, const Strided& mean,
                        const Strided& invstd, const std::optional<Strided>& weight,
                        const std::optional<Strided>& bias);

// Training: save_mean (C) = batch mean, save_invstd (C) = 1 / sqrt(biased var +
// eps), two passes in double; blends `running` (unbiased var) when given.
void batch_norm_batch_stats(const Strided& save_mean, const Strided& save_invstd, const Strided& x,
                            double eps, const std::optional<kernel::RunningStats>& running);

// Writes the gradients that are given: dweight = sum dy * xhat, dbias = sum dy,
// with xhat = (x - mean) * invstd; dx = weight * invstd * dy in eval, and
// weight * invstd * (dy - (dbias + xhat * dweight) / M) in training (the sums
// in double, a block per channel).
void batch_norm_backward(const std::optional<Strided>& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd,
                         const std::optional<Strided>& weight, bool training);

}  // namespace loom::cuda
