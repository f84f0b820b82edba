// File: core/onednn/matmul.h
// Batched matrix products on oneDNN, with core/cpu/gemm.h's matmul signature:
// the path of every CPU matmul (matmul, linear, their gradients) on this tier.
// Measured against Debian's OpenBLAS 0.3.21 (its SkylakeX kernels, one
// thread), oneDNN's brgemm matmul was 3-12% faster on linear layers' shapes.
//
// M, N, K: C (M, N) = A (M, K) . B (K, N); "batch" is any number of leading dims.
//
// Operands are float32 views with unit stride in one of their last two dims
// (plain or transposed); batch dims alike in all three, strided any way but
// never repeating (stride 0). Returns false, having written nothing, when the
// tier is off or oneDNN does not take the operands.
#pragma once

#include "core/strided.h"

namespace loom::onednn {

// c = a . b, or c += a . b when `accumulate`.
bool matmul(const Strided& c, const Strided& a, const Strided& b, bool accumulate = false);

}  // namespace loom::onednn
