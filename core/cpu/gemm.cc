// File: core/cpu/gemm.cc
// OpenBLAS (openblas.h) behind the row-major gemm wrapper, and the batched Strided matmul.
//
// M, N, K: C (M, N) = A (M, K) . B (K, N); "batch" is any number of leading dims.
#include "core/cpu/gemm.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "core/cpu/loop.h"
#include "core/cpu/openblas.h"
#include "core/parallel.h"

namespace loom::cpu {
namespace {

CBLAS_TRANSPOSE blas_op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// C = beta * C, for an empty inner dim: BLAS would reject the leading dims of
// zero-width A and B, and there is nothing to multiply anyway.
template <class T>
void scale_matrix(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  }
}

// Where BLAS finds one matrix of a view: stored row-major with row stride ld,
// or (trans) stored column-major with column stride ld.
struct BlasLayout {
  bool trans = false;
  int64_t ld = 1;
};

std::optional<BlasLayout> blas_layout(int64_t rows, int64_t cols, int64_t row_stride,
                                      int64_t col_stride) {
  if (rows == 0 || cols == 0) return BlasLayout{};  // never touched
  // A dim of size 1 never steps, so its stride does not constrain the layout.
  if (col_stride == 1 || cols == 1) {
    int64_t ld = rows == 1 ? cols : row_stride;
    if (ld >= cols) return BlasLayout{false, ld};
  }
  if (row_stride == 1 || rows == 1) {
    int64_t ld = cols == 1 ? rows : col_stride;
    if (ld >= rows) return BlasLayout{true, ld};
  }
  return std::nullopt;
}

// One operand of a batched matmul: its matrix layout and its batch strides.
struct BatchedMatrix {
  BlasLayout layout;
  Shape batch_strides;
};

BatchedMatrix batched_matrix(const Strided& m) {
  int64_t nd = m.dim();
  std::optional<BlasLayout> layout =
      blas_layout(m.sizes[nd - 2], m.sizes[nd - 1], m.strides[nd - 2], m.strides[nd - 1]);
  return {*layout, Shape(m.strides.begin(), m.strides.end() - 2)};
}

void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  openblas().sgemm(CblasRowMajor, blas_op(trans_a), blas_op(trans_b), m, n, k, alpha, a, lda, b,
                   ldb, beta, c, ldc);
}

void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
               int64_t ldc) {
  openblas().dgemm(CblasRowMajor, blas_op(trans_a), blas_op(trans_b), m, n, k, alpha, a, lda, b,
                   ldb, beta, c, ldc);
}

// Below this many multiply-adds a product runs on one thread: splitting costs
// more than it saves.
constexpr int64_t kSplitWork = int64_t{1} << 18;

// Outside a parallel loop, a large product is split over the pool along the
// longer of C's dims: each chunk is an independent row (or column) block of C,
// equal to the unsplit product to rounding (core/parallel.h).
template <class T>
void split_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (in_parallel_region() || m * n * k < kSplitWork) {
    return blas_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  if (m >= n) {
    parallel_for(0, m, 16, [&](int64_t i0, int64_t i1) {
      blas_gemm(trans_a, trans_b, i1 - i0, n, k, alpha, trans_a ? a + i0 : a + i0 * lda, lda, b,
                ldb, beta, c + i0 * ldc, ldc);
    });
  } else {
    parallel_for(0, n, 16, [&](int64_t j0, int64_t j1) {
      blas_gemm(trans_a, trans_b, m, j1 - j0, k, alpha, a, lda, trans_b ? b + j0 * ldb : b + j0,
                ldb, beta, c + j0, ldc);
    });
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_matrix(m, n, beta, c, ldc);
  split_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_matrix(m, n, beta, c, ldc);
  split_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool is_blas_matrix(const Strided& m) {
  int64_t nd = m.dim();
  return nd >= 2 &&
         blas_layout(m.sizes[nd - 2], m.sizes[nd - 1], m.strides[nd - 2], m.strides[nd - 1])
             .has_value();
}

Strided transpose_last(const Strided& m) {
  Strided t = m;
  int64_t nd = m.dim();
  std::swap(t.sizes[nd - 2], t.sizes[nd - 1]);
  std::swap(t.strides[nd - 2], t.strides[nd - 1]);
  return t;
}

void matmul(const Strided& c, const Strided& a, const Strided& b, bool accumulate) {
  int64_t nd = c.dim();
  int64_t m = c.sizes[nd - 2], n = c.sizes[nd - 1], k = a.sizes[nd - 1];
  Shape batch(c.sizes.begin(), c.sizes.end() - 2);
  BatchedMatrix mc = batched_matrix(c), ma = batched_matrix(a), mb = batched_matrix(b);
  visit_float(c.dtype, [&]<class T>() {
    const T beta = accumulate ? T(1) : T(0);
    for_each_offset<3>(batch, {&mc.batch_strides, &ma.batch_strides, &mb.batch_strides},
                       [&](const auto& o) {
                         T* pc = c.ptr<T>() + o[0];
                         const T* pa = a.ptr<T>() + o[1];
                         const T* pb = b.ptr<T>() + o[2];
                         if (mc.layout.trans) {  // C^T (N, M) = B^T . A^T, row-major
                           gemm(!mb.layout.trans, !ma.layout.trans, n, m, k, T(1), pb, mb.layout.ld,
                                pa, ma.layout.ld, beta, pc, mc.layout.ld);
                         } else {
                           gemm(ma.layout.trans, mb.layout.trans, m, n, k, T(1), pa, ma.layout.ld,
                                pb, mb.layout.ld, beta, pc, mc.layout.ld);
                         }
                       });
  });
}

}  // namespace loom::cpu
