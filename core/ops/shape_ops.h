// File: core/ops/shape_ops.h
// Ops that rearrange whole tensors rather than compute on elements.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace loom {

// Concatenates along `dim` (may be negative), as torch.cat: every tensor has the
// same number of dims and device, and the same sizes except in `dim`. Dtypes
// may differ: the result has the dtype they promote to (promote_types in
// core/dtype.h: float32 with bfloat16 -> float32, int64 with float32 ->
// float32, Bool with anything -> the other), and the conversion is
// differentiable, so each input's gradient is its slice of the output's, in its
// own dtype.
//   cat({a, b}, 1);  // a (N, 3), b (N, 5) -> (N, 8)
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Joins tensors of one shape along a new dim `dim` (in [-(ndim+1), ndim]), as
// torch.stack, with cat's dtype promotion and gradient.
//   stack({a, b}, 0);  // a, b (3, 4) -> (2, 3, 4)
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

}  // namespace loom
