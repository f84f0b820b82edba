// File: core/cpu/gemm.h
// Matrix products on the CPU: a thin row-major wrapper over OpenBLAS, and a
// batched matmul over Strided views that every GEMM user (matmul, linear, conv)
// goes through.
//
// M, N, K: C (M, N) = A (M, K) . B (K, N); "batch" is any number of leading dims.
#pragma once

#include <cstdint>

#include "core/strided.h"

namespace loom::cpu {

// C = alpha * op(A) . op(B) + beta * C, all row-major; op(X) is X or its
// transpose. lda/ldb/ldc are row strides of A, B, C as stored (before op), as
// in cblas_?gemm. Handles empty products (K == 0 scales C by beta).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

// True when the last two dims of `m` can be handed to BLAS without a copy: one
// of them has stride 1 and the other steps over whole rows (or columns). Plain
// and transposed views qualify; stepped slices and expanded matrices do not.
bool is_blas_matrix(const Strided& m);

// The same view with its last two dims swapped (no copy).
Strided transpose_last(const Strided& m);

// c (batch, M, N) = a (batch, M, K) . b (batch, K, N), or c += a . b when
// `accumulate`. All three share one float dtype and one batch shape; batch dims
// may have any strides, including 0 for broadcast operands. a, b and c must
// satisfy is_blas_matrix (the op copies an operand that does not). With
// `accumulate`, c may repeat one matrix along a batch dim (stride 0): the
// products over that dim are summed into it, which is how the gradient of a
// broadcast operand is reduced.
void matmul(const Strided& c, const Strided& a, const Strided& b, bool accumulate = false);

}  // namespace loom::cpu
