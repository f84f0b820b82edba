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

#include <cstddef>
#include <initializer_list>
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

// The training backward over rows, beside the one above: every tensor of x's
// shape dense rows of C channels (channels innermost and the other dims in
// order: channels-last, or (N, C)), C <= 256. A block per range of rows rather
// than per channel, so it fills the GPU when C is small; the sums in double,
// added in a fixed order. With y (the output of a ReLU after the norm) the
// gradient first passes the ReLU (dpre = dy where y > 0), and dresidual, when
// given, receives dpre (the gradient of a residual added before the ReLU).
struct BatchNormRowsBackward {
  std::optional<Strided> dx, dresidual;
  Strided dy, x;
  std::optional<Strided> y;
  Strided mean, invstd;
  std::optional<Strided> weight, dweight, dbias;
};

// Whether batch_norm_backward_rows takes x and the others of its shape.
bool batch_norm_rows_supported(const Strided& x, std::initializer_list<const Strided*> others);
// The scratch batch_norm_backward_rows needs for x, in bytes.
size_t batch_norm_rows_scratch_bytes(const Strided& x);
void batch_norm_backward_rows(const BatchNormRowsBackward& a, void* scratch);

}  // namespace loom::cuda
