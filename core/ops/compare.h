// File: core/ops/compare.h
// Comparisons that give boolean masks, and selection by a mask, as PyTorch's
// eq / ne / lt / le / gt / ge, where and masked_fill:
//
//   Tensor correct = (logits.argmax(1) == y).sum();   // int64 0-d: how many match
//   Tensor positive = where(x > 0, x, zeros_like(x));
//   Tensor scores = masked_fill(scores, padding == 1, -1e9);
//
// A mask is a tensor of dtype Bool (one byte per element, 0 or 1). Comparisons
// take any dtypes on one device and broadcast as NumPy does; operands of
// different dtypes compare as the wider one (a floating dtype wins over an
// integer one, else int64). Masks carry no gradient; where and masked_fill
// pass the gradient to the elements they select.
#pragma once

#include "core/tensor.h"

namespace loom {

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Against a number, compared in double (every int32, int64 up to 2^53 exact).
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);

// cond ? a : b elementwise; cond (Bool), a and b broadcast together; a and b
// have one dtype (any) and device. Differentiable in a and b: each gets the
// gradient where it was selected (summed over broadcast dims).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` wherever mask (Bool, broadcast to x's shape) is true; the
// gradient passes where mask is false.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace loom
