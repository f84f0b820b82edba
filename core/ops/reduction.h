// File: core/ops/reduction.h
// Reductions: sum, mean, max and argmax over all or some dims, and sum_to.
#pragma once

#include "core/tensor.h"

namespace loom {

// Bool and integer tensors sum to int64 (a mask's sum counts its true
// elements); a Bool mask's mean is a float32 fraction (integer tensors have no
// mean: TypeError, as in PyTorch). None of these carries a gradient.
Tensor sum(const Tensor& x);  // all elements -> 0-D
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor max(const Tensor& x);  // all elements -> 0-D; grad split evenly among ties

struct MaxResult {
  Tensor values;   // differentiable; grad goes to the index below
  Tensor indices;  // int64, first occurrence
};
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

// Sums `x` down to `sizes` over broadcast dims (the backward of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& sizes);

}  // namespace loom
