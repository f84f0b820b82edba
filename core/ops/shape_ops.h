// File: core/ops/shape_ops.h
// Ops that rearrange whole tensors rather than compute on elements.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace loom {

// Concatenates along `dim` (may be negative), as torch.cat: every tensor has the
// same number of dims, dtype (any dtype) and device, and the same sizes except
// in `dim`. Differentiable: each input's gradient is its slice of the output's.
//   cat({a, b}, 1);  // a (N, 3), b (N, 5) -> (N, 8)
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);

}  // namespace loom
