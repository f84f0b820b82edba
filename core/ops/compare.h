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
// different dtypes compare in the dtype they promote to (promote_types,
// core/dtype.h). Masks carry no gradient; where and masked_fill pass the
// gradient to the elements they select.
//
// Masks combine with logical ops, which take any dtypes (nonzero, NaN included,
// is true) and give Bool, and with the operators &, |, ^ and ~ on Bool tensors:
//
//   Tensor keep = (x > 0) & ~(y == 0);          // logical_and(x > 0, logical_not(y == 0))
//   Tensor same = allclose(y, expected, 1e-5, 1e-8);
#pragma once

#include <optional>

#include "core/tensor.h"

namespace loom {

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Against a number: a floating tensor compares in its dtype, the number rounded
// to it first as PyTorch rounds it (a float32 x holding 0.1f equals 0.1); an
// integer or Bool tensor compares with a whole number in double (exact for every
// int32, and int64 up to 2^53) and with a fractional one in float32, as PyTorch
// promotes an integer tensor and a Python float (int32 16777217 < 16777216.5 is
// false, both rounding to 16777216). scalar_comparison_dtype says which.
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
// The dtype a tensor of `dtype` and the number `scalar` compare in (above).
DType scalar_comparison_dtype(DType dtype, double scalar);

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

// The larger (smaller) of a and b elementwise, as torch.maximum / minimum: one
// dtype and device, broadcast together; NaN where either is NaN; at a tie each
// operand gets half the gradient, as in PyTorch.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// Truth-valued ops as torch.logical_*: any dtypes on one device, broadcast;
// an element is true when nonzero (NaN is true). The result is Bool.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
// The same on Bool tensors only, as PyTorch's bitwise operators on masks (on
// other dtypes they throw a TypeError: Loom has no integer bitwise ops).
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& x);

// Which elements are NaN, infinite (+inf or -inf, or one of them), or finite,
// as torch.isnan / isinf / isposinf / isneginf / isfinite: a Bool mask of x's
// shape; every element of an integer or Bool tensor is finite.
//   LOOM_CHECK(!any(isnan(loss)).item(), ...);  // stop before a NaN spreads
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isposinf(const Tensor& x);
Tensor isneginf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// x with NaN replaced by `nan`, +inf by `posinf` and -inf by `neginf` (by default
// the largest and the lowest finite value of x's dtype), as torch.nan_to_num.
// The gradient passes where x is finite (0 elsewhere); an integer or Bool x
// comes back as a copy.
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);

// |a - b| <= atol + rtol * |b| elementwise, or a == b (equal infinities), or
// both NaN when equal_nan, as torch.isclose: a and b have one dtype (any) and
// device and broadcast; floating values are compared in their own precision
// (16-bit ones in float32), integers in float64. rtol, atol >= 0.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
               bool equal_nan = false);
// Whether isclose holds everywhere (reads one value back from the device).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);
// Same sizes and every element equal, as torch.equal: dtypes may differ (the
// values compare in the promoted dtype); NaN never equals anything.
bool equal(const Tensor& a, const Tensor& b);

}  // namespace loom
