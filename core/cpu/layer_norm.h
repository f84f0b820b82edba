// File: core/cpu/layer_norm.h
// Layer normalization over the rows of a matrix: the CPU kernels beneath
// layer_norm, normalize and group_norm, one pass per row where the composed ops
// took eight tensor ops forward and a dozen backward.
//
// N rows, D values per row (the normalized trailing dims, flattened).
// x, y, dx, dy are dense row-major (N, D); mean and invstd (N) and weight,
// bias, dweight, dbias (D) are dense vectors. All share one float dtype. An
// absent weight or bias (nullopt) acts as 1 or 0. Sums accumulate in double.
#pragma once

#include <optional>

#include "core/strided.h"

namespace loom::cpu {

// mean = row mean, invstd = 1 / sqrt(biased row variance + eps),
// y = (x - mean) * invstd * weight + bias.
void layer_norm_forward(const Strided& y, const Strided& mean, const Strided& invstd, const Strided& x,
                        const std::optional<Strided>& weight, const std::optional<Strided>& bias, double eps);

// From the forward's statistics, with xhat = (x - mean) * invstd and g = dy * weight:
//   dx = invstd * (g - mean_row(g) - xhat * mean_row(g * xhat))
//   dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy  (each when given).
void layer_norm_backward(const Strided& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd, const std::optional<Strided>& weight);

}  // namespace loom::cpu
