// File: core/cpu/elementwise.h
// Elementwise kernels over Strided operands of equal sizes (broadcast inputs
// arrive as stride-0 views). float32 and float64, and for unary, binary,
// binary_scalar and add_scaled also int32, int64 and uint8 (wrapping around, as
// kernel::math computes them); all operands share one dtype.
#pragma once

#include "core/kernel/elementwise.h"
#include "core/strided.h"

namespace loom::cpu {

void unary(const Strided& out, const Strided& in, kernel::UnaryOp op);
void binary(const Strided& out, const Strided& a, const Strided& b, kernel::BinaryOp op);
// out = a op scalar, or scalar op a when scalar_first (for 2 - x, 1 / x).
void binary_scalar(const Strided& out, const Strided& a, double scalar, kernel::BinaryOp op,
                   bool scalar_first = false);
// Whether any element of x is zero: the ops layer refuses an integer division by
// zero before the kernel runs, as PyTorch's CPU raises ZeroDivisionError.
bool has_zero(const Strided& x);
// out = a + alpha * b.
void add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha);
// out = min(max(in, lo), hi).
void clamp(const Strided& out, const Strided& in, double lo, double hi);
// dx = dy where lo <= x <= hi, else 0 (PyTorch's convention at the bounds).
void clamp_backward(const Strided& dx, const Strided& dy, const Strided& x, double lo, double hi);

// Gradients of out = a^b (same sizes): da = dy b a^(b-1), 0 where b == 0;
// db = dy out log(a), 0 where a == 0 and b >= 0 (PyTorch's convention at a = 0).
void pow_backward(const Strided& da, const Strided& db, const Strided& dy, const Strided& a,
                  const Strided& b, const Strided& out);

}  // namespace loom::cpu
