// File: core/cuda/layer_norm.h
// Layer normalization over the rows of a matrix on the GPU: the twins of
// core/cpu/layer_norm.h, and the tier beneath cuDNN's layer-norm graphs
// (core/cudnn/norm.h) for what no engine runs: a lazy plan still building,
// 16-bit and float64 rows. Work is queued on cuda::current_stream().
//
// N rows, D values per row (the normalized trailing dims, flattened).
// x, y, dx, dy are dense row-major (N, D) of one floating dtype (float32,
// float64, bfloat16, float16); weight, bias, dweight and dbias (D) have that
// dtype; mean and invstd (N) are float32 for the 16-bit dtypes, else x's. All
// vectors are dense. An absent weight or bias (nullopt) acts as 1 or 0.
// A warp normalizes a row; sums run in float32 (float64 for float64) in an order
// fixed by the shapes, so equal inputs give the same bits on every run.
#pragma once

#include <optional>

#include "core/strided.h"

namespace loom::cuda {

// mean = row mean, invstd = 1 / sqrt(biased row variance + eps) (two passes
// over the row), y = (x - mean) * invstd * weight + bias.
void layer_norm_forward(const Strided& y, const Strided& mean, const Strided& invstd, const Strided& x,
                        const std::optional<Strided>& weight, const std::optional<Strided>& bias, double eps);

// From the forward's statistics, with xhat = (x - mean) * invstd and g = dy * weight:
//   dx = invstd * (g - mean_row(g) - xhat * mean_row(g * xhat))
//   dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy  (each when given).
// The column sums take scratch from the caching allocator.
void layer_norm_backward(const Strided& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd, const std::optional<Strided>& weight);

}  // namespace loom::cuda
