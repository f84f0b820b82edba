// File: tests/core/cpu/gemm_test.cc
// The GEMM wrapper and the batched Strided matmul against naive loops, on raw
// buffers (no Tensor), for float32 and float64.
//
// M, N, K: C (M, N) = A (M, K) . B (K, N); B batch.
#include "core/cpu/gemm.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

namespace loom::cpu {
namespace {

std::vector<double> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> out(count);
  for (double& v : out) v = normal(rng);
  return out;
}

template <class T>
std::vector<T> cast(const std::vector<double>& values) {
  return std::vector<T>(values.begin(), values.end());
}

template <class T>
double max_abs_diff(const std::vector<T>& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(actual[i]) - expected[i]));
  }
  return worst;
}

// Element (i, j) of a row-major matrix with row stride ld, or of the transpose
// of one when `trans` (the matrix as stored is (cols, rows)).
double element(const std::vector<double>& m, bool trans, int64_t ld, int64_t i, int64_t j) {
  return trans ? m[j * ld + i] : m[i * ld + j];
}

// Naive strided view of a row-major buffer.
Strided view(void* data, DType dtype, Shape sizes, Shape strides) {
  return Strided{data, dtype, std::move(sizes), std::move(strides)};
}

}  // namespace

TEST_CASE("gemm: a hand-checked 2x3 . 3x2 product") {
  // A = [[1, 2, 3], [4, 5, 6]], B = [[1, 0], [0, 1], [1, 1]]
  std::vector<double> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1}, c(4, -7.0);
  gemm(false, false, 2, 2, 3, 1.0, a.data(), 3, b.data(), 2, 0.0, c.data(), 2);
  CHECK(c == std::vector<double>{4, 5, 10, 11});
}

TEST_CASE_TEMPLATE("gemm: every transpose combination with padded leading dims", T, float, double) {
  const int64_t m = 5, n = 4, k = 3, pad = 2;
  const double alpha = 0.5, beta = -1.5;
  double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      CAPTURE(trans_a);
      CAPTURE(trans_b);
      // Stored shapes: A (M, K) or (K, M), B (K, N) or (N, K); rows padded by `pad`.
      int64_t lda = (trans_a ? m : k) + pad, ldb = (trans_b ? k : n) + pad, ldc = n + pad;
      std::vector<double> a = random_values((trans_a ? k : m) * lda, 1);
      std::vector<double> b = random_values((trans_b ? n : k) * ldb, 2);
      std::vector<double> c = random_values(m * ldc, 3);
      std::vector<double> expected = c;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0.0;
          for (int64_t p = 0; p < k; ++p) {
            dot += element(a, trans_a, lda, i, p) * element(b, trans_b, ldb, p, j);
          }
          expected[i * ldc + j] = alpha * dot + beta * c[i * ldc + j];
        }
      }
      std::vector<T> ta = cast<T>(a), tb = cast<T>(b), tc = cast<T>(c);
      gemm(trans_a, trans_b, m, n, k, T(alpha), ta.data(), lda, tb.data(), ldb, T(beta), tc.data(),
           ldc);
      CHECK(max_abs_diff(tc, expected) < tol);  // also checks the padding is untouched
    }
  }
}

TEST_CASE("gemm: an empty inner dim scales C by beta") {
  std::vector<double> c = {1, 2, 3, 4};
  gemm(false, false, 2, 2, 0, 1.0, nullptr, 1, nullptr, 2, 3.0, c.data(), 2);
  CHECK(c == std::vector<double>{3, 6, 9, 12});
  gemm(false, false, 2, 2, 0, 1.0, nullptr, 1, nullptr, 2, 0.0, c.data(), 2);
  CHECK(c == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("is_blas_matrix: plain and transposed views pass, stepped and expanded do not") {
  double dummy = 0.0;
  auto matrix = [&](Shape sizes, Shape strides) {
    return is_blas_matrix(view(&dummy, DType::Float64, std::move(sizes), std::move(strides)));
  };
  CHECK(matrix({3, 4}, {4, 1}));        // contiguous
  CHECK(matrix({3, 4}, {1, 3}));        // transpose of a contiguous (4, 3)
  CHECK(matrix({3, 2}, {4, 1}));        // first two columns of a (3, 4)
  CHECK(matrix({2, 3, 4}, {0, 4, 1}));  // broadcast batch dims are fine
  CHECK(matrix({1, 4}, {1, 3}));        // one row with stepped columns: column-major
  CHECK_FALSE(matrix({3, 4}, {8, 2}));  // every other column
  CHECK_FALSE(matrix({3, 4}, {0, 1}));  // rows expanded from one
  CHECK_FALSE(matrix({3, 4}, {2, 1}));  // overlapping rows
  CHECK_FALSE(matrix({4}, {1}));        // not a matrix

  Strided t = transpose_last(view(&dummy, DType::Float64, {2, 3, 4}, {12, 4, 1}));
  CHECK(t.sizes == Shape{2, 4, 3});
  CHECK(t.strides == Shape{12, 1, 4});
}

TEST_CASE_TEMPLATE("matmul: broadcast batch and a transposed operand against loops", T, float,
                   double) {
  // c (2, 3, M, N) = a (2, 1, M, K) broadcast over dim 1 . b stored as
  // (3, N, K) and viewed transposed as (3, K, N), broadcast over dim 0.
  const int64_t m = 4, n = 5, k = 6;
  std::vector<double> a = random_values(2 * m * k, 4), b = random_values(3 * n * k, 5);
  std::vector<T> ta = cast<T>(a), tb = cast<T>(b), tc(2 * 3 * m * n, T(99));
  DType dtype = dtype_of<T>();
  Strided va = view(ta.data(), dtype, {2, 3, m, k}, {m * k, 0, k, 1});
  Strided vb = view(tb.data(), dtype, {2, 3, k, n}, {0, n * k, 1, k});
  Strided vc = view(tc.data(), dtype, {2, 3, m, n}, {3 * m * n, m * n, n, 1});
  matmul(vc, va, vb);

  std::vector<double> expected(tc.size());
  for (int64_t i0 = 0; i0 < 2; ++i0) {
    for (int64_t i1 = 0; i1 < 3; ++i1) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0.0;
          for (int64_t p = 0; p < k; ++p) dot += a[(i0 * m + i) * k + p] * b[(i1 * n + j) * k + p];
          expected[((i0 * 3 + i1) * m + i) * n + j] = dot;
        }
      }
    }
  }
  CHECK(max_abs_diff(tc, expected) < (std::is_same_v<T, float> ? 1e-4 : 1e-12));
}

TEST_CASE("matmul: accumulating into a stride-0 batch sums the products") {
  // c (M, N) += sum over batch b of a_b (M, K) . b_b (K, N), with c viewed as (3, M, N).
  const int64_t batch = 3, m = 2, n = 3, k = 4;
  std::vector<double> a = random_values(batch * m * k, 6), b = random_values(batch * k * n, 7);
  std::vector<double> c = {1, 1, 1, 1, 1, 1};
  std::vector<double> expected = c;
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t p = 0; p < k; ++p) {
          expected[i * n + j] += a[(bi * m + i) * k + p] * b[(bi * k + p) * n + j];
        }
      }
    }
  }
  matmul(view(c.data(), DType::Float64, {batch, m, n}, {0, n, 1}),
         view(a.data(), DType::Float64, {batch, m, k}, {m * k, k, 1}),
         view(b.data(), DType::Float64, {batch, k, n}, {k * n, n, 1}), /*accumulate=*/true);
  CHECK(max_abs_diff(c, expected) < 1e-12);
}

TEST_CASE("matmul: a transposed output is written through C^T = B^T . A^T") {
  // A = [[1, 2], [3, 4]], B = I: C = A, stored column-major.
  std::vector<double> a = {1, 2, 3, 4}, b = {1, 0, 0, 1}, c(4, 0.0);
  matmul(view(c.data(), DType::Float64, {2, 2}, {1, 2}),
         view(a.data(), DType::Float64, {2, 2}, {2, 1}),
         view(b.data(), DType::Float64, {2, 2}, {2, 1}));
  CHECK(c == std::vector<double>{1, 3, 2, 4});
}

}  // namespace loom::cpu
