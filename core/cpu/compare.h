// File: core/cpu/compare.h
// Comparisons into boolean masks, and selection by a mask: the kernels behind
// loom::eq / lt / ... and loom::where (core/ops/compare.h). Operands have equal
// sizes (broadcast inputs arrive as stride-0 views), any strides.
#pragma once

#include "core/kernel/compare.h"
#include "core/strided.h"

namespace loom::cpu {

// out (bool) = a op b; a and b share one dtype (any dtype).
void compare(const Strided& out, const Strided& a, const Strided& b, kernel::CompareOp op);
// out (bool) = a op scalar, compared in double (exact for every int32 and for
// int64 up to 2^53).
void compare_scalar(const Strided& out, const Strided& a, double scalar, kernel::CompareOp op);
// out (bool) = |a - b| <= atol + rtol |b|, or a == b, or both NaN when
// equal_nan (torch.isclose); a and b share one dtype (any), computed in
// kernel::math::close_t of it.
void isclose(const Strided& out, const Strided& a, const Strided& b, double rtol, double atol,
             bool equal_nan);
// out = cond ? a : b elementwise; cond bool; out, a and b share one dtype (any).
void where(const Strided& out, const Strided& cond, const Strided& a, const Strided& b);

}  // namespace loom::cpu
