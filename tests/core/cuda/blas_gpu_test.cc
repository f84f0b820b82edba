// File: tests/core/cuda/blas_gpu_test.cc
// cuda::matmul (cuBLAS) against cpu::matmul on the same inputs, over the rank,
// broadcast and stride grid of tests/core/ops/linalg_test.cc: the product and
// both gradients (accumulated into views that repeat along broadcast dims), in
// strict fp32 (tight), tf32 (loose) and float64; then transposed outputs,
// batch dims that do not merge, empty inner dims and the cuBLAS error check.
//
// M, N, K: (M, K) . (K, N) -> (M, N); B batch.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cuda/blas.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// An operand: random values stored densely as `stored`, and the view of them
// the product sees (applied alike to the CPU and the GPU copy).
struct Operand {
  Shape stored;
  std::function<Tensor(const Tensor&)> view;
};

Operand dense(Shape sizes) {
  return {std::move(sizes), [](const Tensor& t) { return t; }};
}
// The transpose of a dense (..., cols, rows) tensor: unit stride along rows.
Operand transposed(Shape sizes) {
  std::swap(sizes[sizes.size() - 1], sizes[sizes.size() - 2]);
  return {std::move(sizes), [](const Tensor& t) { return t.transpose(-1, -2); }};
}
// Every other element of the last dim of a wider tensor: no BLAS layout.
Operand stepped(Shape sizes) {
  sizes.back() *= 2;
  const int64_t wide = sizes.back();
  return {std::move(sizes), [wide](const Tensor& t) { return t.slice(-1, 0, wide, 2); }};
}
// Size-1 dim `dim` of `sizes` expanded to `size` (stride 0).
Operand expanded(Shape sizes, int64_t dim, int64_t size) {
  Shape target = sizes;
  target[dim] = size;
  return {std::move(sizes), [target](const Tensor& t) { return t.expand(target); }};
}
// A dense tensor stored with its first two dims swapped, then swapped back:
// batch dims whose strides do not merge into one.
Operand swapped_batch(Shape sizes) {
  std::swap(sizes[0], sizes[1]);
  return {std::move(sizes), [](const Tensor& t) { return t.transpose(0, 1); }};
}

struct MatmulCase {
  std::string name;
  Operand a, b;
};

std::vector<MatmulCase> grid() {
  return {
      {"vector . vector", dense({5}), dense({5})},
      {"matrix . matrix", dense({3, 5}), dense({5, 4})},
      {"vector . matrix", dense({5}), dense({5, 4})},
      {"matrix . vector", dense({3, 5}), dense({5})},
      {"batch . matrix", dense({2, 3, 5}), dense({5, 4})},
      {"matrix . batch", dense({3, 5}), dense({2, 5, 4})},
      {"batch . vector", dense({2, 3, 5}), dense({5})},
      {"vector . batch", dense({5}), dense({2, 5, 4})},
      {"batch . batch", dense({2, 3, 5}), dense({2, 5, 4})},
      {"broadcast batch dims", dense({2, 1, 3, 5}), dense({3, 5, 4})},
      {"broadcast both ways", dense({1, 3, 3, 5}), dense({2, 1, 5, 4})},
      {"transposed right operand", dense({2, 3, 5}), transposed({2, 5, 4})},
      {"transposed left operand", transposed({3, 5}), dense({5, 4})},
      {"stepped operands", stepped({3, 5}), stepped({2, 5, 4})},
      {"stepped vector", stepped({5}), dense({5, 4})},
      {"expanded batch", expanded({1, 3, 5}, 0, 2), dense({2, 5, 4})},
      {"expanded rows", expanded({3, 1}, 1, 5), dense({5, 4})},
      {"empty inner dim", dense({3, 0}), dense({0, 4})},
      {"empty batch", dense({0, 3, 5}), dense({5, 4})},
      {"batch dims that do not merge", swapped_batch({2, 3, 4, 5}), dense({2, 3, 5, 6})},
      {"broadcast gradient folded into K", dense({4, 3, 7}), transposed({7, 6})},
      {"large enough for tensor cores", dense({2, 64, 256}), transposed({256, 48})},
  };
}

// `t` as the kernel sees it, as core/ops/linalg.cc builds it: a 1-D operand
// becomes a row (1, K) on the left or a column (K, 1) on the right, then the
// batch dims broadcast with stride 0.
Tensor batched(const Tensor& t, const Shape& batch, bool left) {
  Tensor m = t.dim() == 1 ? t.unsqueeze(left ? 0 : 1) : t;
  Shape sizes = batch;
  sizes.push_back(m.size(-2));
  sizes.push_back(m.size(-1));
  return m.expand(sizes);
}

Shape batch_of(const Tensor& t) {
  return t.dim() <= 2 ? Shape{} : Shape(t.sizes().begin(), t.sizes().end() - 2);
}

// cpu::matmul wants BLAS-ready inputs (the op copies the others); cuda::matmul
// takes any view.
Tensor cpu_ready(const Tensor& t) { return cpu::is_blas_matrix(t.strided()) ? t : t.contiguous(); }
Tensor as_is(const Tensor& t) { return t; }

// One side's tensors: the operands' views and the product's batch shape.
struct Side {
  Tensor a, b;  // unbatched views, as a user passes them
  Tensor da, db, y;
};

// The product and both gradients, accumulated onto random starting values
// through batched views that repeat (stride 0) wherever a or b broadcasts.
// `matmul` is cpu::matmul or cuda::matmul; `ready` prepares its inputs.
template <class Matmul>
void run_side(Side& s, const Tensor& dy, const Shape& batch, Matmul matmul,
              Tensor (*ready)(const Tensor&)) {
  const Tensor ab = ready(batched(s.a, batch, true)), bb = ready(batched(s.b, batch, false));
  const Tensor dyb = ready(batched(dy, batch, true));
  matmul(batched(s.y, batch, true).strided(), ab.strided(), bb.strided(), false);
  matmul(batched(s.da, batch, true).strided(), dyb.strided(), ready(bb.transpose(-1, -2)).strided(),
         true);
  matmul(batched(s.db, batch, false).strided(), ready(ab.transpose(-1, -2)).strided(),
         dyb.strided(), true);
}

// Relative Frobenius error ||a - b|| / ||b||.
double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = testing::values(a), y = testing::values(b);
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// How close GPU results must be: elementwise (skipped where rtol is 0), and in
// relative Frobenius norm (skipped where 0). Tensor-core math is checked in
// norm only: its error is relative to the row and column sizes, not to each
// element.
struct Tolerance {
  double rtol, atol, frobenius;
};

void check_near(const Tensor& gpu, const Tensor& cpu_result, Tolerance t) {
  const Tensor host = gpu.cpu();
  if (t.rtol > 0) CHECK_CLOSE(host, cpu_result, t.rtol, t.atol);
  if (t.frobenius > 0) CHECK(relative_error(host, cpu_result) < t.frobenius);
}

void check_case(const MatmulCase& c, DType dtype, Tolerance tol, Generator& gen) {
  CAPTURE(c.name);
  CAPTURE(dtype_name(dtype));
  const TensorOptions options{.dtype = dtype};
  Tensor a_stored = randn(c.a.stored, options, &gen), b_stored = randn(c.b.stored, options, &gen);
  Side host{c.a.view(a_stored), c.b.view(b_stored), {}, {}, {}};
  Side dev{
      c.a.view(a_stored.to(testing::test_gpu())), c.b.view(b_stored.to(testing::test_gpu())), {}, {}, {}};
  const Shape batch = broadcast_shapes(batch_of(host.a), batch_of(host.b), "test");
  const int64_t m = host.a.dim() == 1 ? 1 : host.a.size(-2);
  const int64_t n = host.b.dim() == 1 ? 1 : host.b.size(-1);
  Shape y_sizes = batch;
  y_sizes.push_back(m);
  y_sizes.push_back(n);
  Tensor dy = randn(y_sizes, options, &gen);
  host.y = zeros(y_sizes, options);
  dev.y = full(y_sizes, NAN, {.dtype = dtype, .device = testing::test_gpu()});
  host.da = randn(host.a.sizes(), options, &gen);
  host.db = randn(host.b.sizes(), options, &gen);
  dev.da = host.da.to(testing::test_gpu());
  dev.db = host.db.to(testing::test_gpu());

  run_side(host, dy, batch, cpu::matmul, cpu_ready);
  run_side(dev, dy.to(testing::test_gpu()), batch, cuda::matmul, as_is);
  check_near(dev.y, host.y, tol);
  check_near(dev.da, host.da, tol);
  check_near(dev.db, host.db, tol);
}

void check_grid(Precision precision, DType dtype, Tolerance tol, uint64_t seed) {
  NumericsGuard guard({.precision = precision});
  CAPTURE(std::string(precision_name(precision)));
  Generator gen(seed);
  for (const MatmulCase& c : grid()) check_case(c, dtype, tol, gen);
}

}  // namespace

LOOM_GPU_TEST_CASE("cuBLAS matmul matches cpu::matmul in strict fp32, forward and gradients") {
  // Both sides round in fp32, in different orders: with K = 256 the sums differ
  // by ~1e-5 near zero, hence atol 1e-4; TF32 (~1e-3 relative) fails all three.
  check_grid(Precision::StrictFp32, DType::Float32, {1e-5, 1e-4, 1e-5}, 61);
}

LOOM_GPU_TEST_CASE("cuBLAS matmul under tf32 is within tf32 tolerance") {
  // TF32 keeps 10 mantissa bits: each product carries ~5e-4 relative error.
  check_grid(Precision::Tf32, DType::Float32, {0, 0, 5e-3}, 62);
}

LOOM_GPU_TEST_CASE("cuBLAS matmul in float64 is exact to rounding under any policy") {
  check_grid(Precision::Tf32, DType::Float64, {1e-11, 1e-11, 0}, 63);
  check_grid(Precision::StrictFp32, DType::Float64, {1e-11, 1e-11, 0}, 64);
}

LOOM_GPU_TEST_CASE("cuBLAS matmul writes transposed and strided outputs in place") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  Generator gen(65);
  Tensor a = randn({3, 6, 5}, {}, &gen), b = randn({3, 5, 4}, {}, &gen);
  Tensor ref = zeros({3, 6, 4});
  cpu::matmul(ref.strided(), a.strided(), b.strided());
  Tensor ga = a.to(testing::test_gpu()), gb = b.to(testing::test_gpu());
  // c stored (B, N, M): column-major matrices.
  Tensor c_t = full({3, 4, 6}, NAN, {.device = testing::test_gpu()}).transpose(1, 2);
  cuda::matmul(c_t.strided(), ga.strided(), gb.strided());
  CHECK_CLOSE(c_t.cpu(), ref, 1e-5, 1e-5);
  // c every other column of a wider tensor: computed densely, then copied in.
  Tensor wide = full({3, 6, 8}, NAN, {.device = testing::test_gpu()});
  Tensor c_step = wide.slice(2, 0, 8, 2);
  cuda::matmul(c_step.strided(), ga.strided(), gb.strided());
  CHECK_CLOSE(c_step.cpu(), ref, 1e-5, 1e-5);
  CHECK(std::isnan(wide.at({0, 0, 1})));  // the columns between stay untouched
}

LOOM_GPU_TEST_CASE("an empty inner dim zeroes c, or leaves it alone when accumulating") {
  Tensor a = empty({3, 0}, {.device = testing::test_gpu()}),
         b = empty({0, 4}, {.device = testing::test_gpu()});
  Tensor c = full({3, 4}, NAN, {.device = testing::test_gpu()});
  cuda::matmul(c.strided(), a.strided(), b.strided());
  CHECK(testing::values(c) == std::vector<double>(12, 0.0));
  c.fill_(2.5);
  cuda::matmul(c.strided(), a.strided(), b.strided(), /*accumulate=*/true);
  CHECK(testing::values(c) == std::vector<double>(12, 2.5));
}

LOOM_GPU_TEST_CASE("a failing cuBLAS call is a CudaError naming the statement and status") {
  CHECK_THROWS_WITH_FRAGMENT(LOOM_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE), CudaError,
                             "[cublas] CUBLAS_STATUS_INVALID_VALUE failed at");
  CHECK_NOTHROW(LOOM_CUBLAS_CHECK(cublasSetMathMode(cuda::blas_handle(), CUBLAS_DEFAULT_MATH)));
}
#endif  // LOOM_WITH_CUDA
