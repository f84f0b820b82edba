// File: tests/core/ops/linalg_test.cc
// matmul and linear: hand cases, a loop reference (forward and gradients) for
// every rank combination with batch broadcasting and strided operands,
// gradcheck, and the argument errors.
//
// M, N, K: (M, K) . (K, N) -> (M, N); B batch; in, out: linear's features.
#include "core/ops/linalg.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/shape.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kFloat64 = {.dtype = DType::Float64};

struct MatmulReference {
  Shape y_sizes;
  std::vector<double> y, da, db;  // row-major; grads for the given dy
};

// Row-major offset of the batch index `index` into batch dims `sizes`, which
// are right-aligned with it and repeat where they have size 1.
int64_t broadcast_offset(const Shape& index, const Shape& sizes) {
  int64_t offset = 0;
  size_t lead = index.size() - sizes.size();
  for (size_t d = 0; d < sizes.size(); ++d) {
    offset = offset * sizes[d] + (sizes[d] == 1 ? 0 : index[lead + d]);
  }
  return offset;
}

// torch.matmul by its definition: 1-D operands become (1, K) and (K, 1), the
// batch dims broadcast, and the promoted dims are dropped from the result.
MatmulReference naive_matmul(const Tensor& a, const Tensor& b, const Tensor& dy) {
  Shape as = a.sizes(), bs = b.sizes();
  bool a_vector = as.size() == 1, b_vector = bs.size() == 1;
  if (a_vector) as.insert(as.begin(), 1);
  if (b_vector) bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  Shape batch(std::max(a_batch.size(), b_batch.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    size_t from_end = batch.size() - i;
    if (from_end <= a_batch.size()) batch[i] = a_batch[a_batch.size() - from_end];
    if (from_end <= b_batch.size())
      batch[i] = std::max(batch[i], b_batch[b_batch.size() - from_end]);
  }
  MatmulReference ref{
      batch, {}, std::vector<double>(a.numel(), 0.0), std::vector<double>(b.numel(), 0.0)};
  if (!a_vector) ref.y_sizes.push_back(m);
  if (!b_vector) ref.y_sizes.push_back(n);
  ref.y.assign(numel_of(batch) * m * n, 0.0);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> gy = dy.defined() ? dy.to_vector<double>() : ref.y;
  for (int64_t flat = 0; flat < numel_of(batch); ++flat) {
    Shape index = unravel_index(batch, flat);
    int64_t a_base = broadcast_offset(index, a_batch) * m * k;
    int64_t b_base = broadcast_offset(index, b_batch) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p) {
          int64_t yi = (flat * m + i) * n + j, ai = a_base + i * k + p, bi = b_base + p * n + j;
          ref.y[yi] += av[ai] * bv[bi];
          ref.da[ai] += gy[yi] * bv[bi];
          ref.db[bi] += gy[yi] * av[ai];
        }
  }
  return ref;
}

Tensor as_tensor(const std::vector<double>& values, const Shape& sizes) {
  return tensor(values, sizes, kFloat64);
}

// A leaf operand built by `make` from a generator, made to require grad.
using MakeOperand = std::function<Tensor(Generator&, TensorOptions)>;

MakeOperand dense(Shape sizes) {
  return [sizes](Generator& gen, TensorOptions o) { return randn(sizes, o, &gen); };
}
// The transpose of a dense (..., cols, rows) tensor: unit stride along rows.
MakeOperand transposed(Shape sizes) {
  return [sizes](Generator& gen, TensorOptions o) {
    Shape stored = sizes;
    std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
    return randn(stored, o, &gen).transpose(-1, -2);
  };
}
// Every other element of the last dim of a wider tensor: no BLAS layout.
MakeOperand stepped(Shape sizes) {
  return [sizes](Generator& gen, TensorOptions o) {
    Shape wide = sizes;
    wide.back() *= 2;
    return randn(wide, o, &gen).slice(-1, 0, wide.back(), 2);
  };
}
// A tensor of `sizes` with size-1 dim `dim` expanded to `size` (stride 0).
MakeOperand expanded(Shape sizes, int64_t dim, int64_t size) {
  return [=](Generator& gen, TensorOptions o) {
    Shape target = sizes;
    target[dim] = size;
    return randn(sizes, o, &gen).expand(target);
  };
}

struct MatmulCase {
  std::string name;
  MakeOperand a, b;
};

}  // namespace

TEST_CASE("matmul: hand-checked products of every rank") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});  // [[1, 2, 3], [4, 5, 6]]
  Tensor b = tensor({1, 0, 0, 1, 1, 1}, {3, 2});  // [[1, 0], [0, 1], [1, 1]]
  CHECK_CLOSE(matmul(a, b), tensor({4, 5, 10, 11}, {2, 2}), 0, 1e-6);
  Tensor v = tensor({1, -1, 2}, {3});
  Tensor dot = matmul(v, v);  // 1 + 1 + 4
  CHECK(dot.dim() == 0);
  CHECK(dot.item() == doctest::Approx(6.0));
  CHECK_CLOSE(matmul(a, v), tensor({5, 11}, {2}), 0, 1e-6);    // 1 - 2 + 6, 4 - 5 + 12
  CHECK_CLOSE(matmul(v, b), tensor({3, 1}, {2}), 0, 1e-6);     // 1 + 2, -1 + 2
  Tensor batch = tensor({1, 0, 0, 1, 2, 0, 0, 2}, {2, 2, 2});  // I and 2I
  CHECK_CLOSE(matmul(batch, tensor({1, 2, 3, 4}, {2, 2})),
              tensor({1, 2, 3, 4, 2, 4, 6, 8}, {2, 2, 2}), 0, 1e-6);
}

TEST_CASE("matmul: every rank combination against loops, forward and gradients") {
  std::vector<MatmulCase> cases = {
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
  };
  uint64_t seed = 1;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const MatmulCase& c : cases) {
      INFO(c.name, " ", dtype_name(dtype));
      Generator gen(seed++);
      TensorOptions options{.dtype = dtype};
      Tensor a = c.a(gen, options).requires_grad_(), b = c.b(gen, options).requires_grad_();
      Tensor y = matmul(a, b);
      Tensor dy = randn(y.sizes(), options, &gen);
      MatmulReference ref = naive_matmul(a, b, dy);
      double tol = dtype == DType::Float32 ? 1e-5 : 1e-12;
      CHECK_CLOSE(y, as_tensor(ref.y, ref.y_sizes), tol, tol);
      CHECK(y.is_contiguous());
      y.backward(dy);
      CHECK_CLOSE(a.grad(), as_tensor(ref.da, a.sizes()), tol, tol);
      CHECK_CLOSE(b.grad(), as_tensor(ref.db, b.sizes()), tol, tol);
    }
  }
}

TEST_CASE("matmul: a gradient flows into one operand only when only it requires grad") {
  Generator gen(3);
  Tensor a = randn({2, 3}, kFloat64, &gen).requires_grad_();
  Tensor b = randn({3, 4}, kFloat64, &gen);
  matmul(a, b).backward(ones({2, 4}, kFloat64));
  CHECK(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  MatmulReference ref = naive_matmul(a, b, ones({2, 4}, kFloat64));
  CHECK_CLOSE(a.grad(), as_tensor(ref.da, {2, 3}), 1e-12, 1e-12);
}

TEST_CASE("matmul: gradcheck") {
  std::vector<MatmulCase> cases = {
      {"vector . vector", dense({4}), dense({4})},
      {"vector . batch", dense({3}), dense({2, 3, 2})},
      {"broadcast batch", dense({2, 1, 2, 3}), transposed({3, 3, 2})},
      {"batch . vector", dense({2, 2, 3}), dense({3})},
  };
  Generator gen(4);
  for (const MatmulCase& c : cases) {
    INFO(c.name);
    Tensor a = c.a(gen, kFloat64).requires_grad_(), b = c.b(gen, kFloat64).requires_grad_();
    GradcheckResult r =
        gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("matmul: bad shapes and dtypes") {
  CHECK_THROWS_WITH_FRAGMENT(matmul(zeros({2, 3}), zeros({4, 5})), ShapeError,
                             "[matmul] shapes (2, 3) and (4, 5) cannot be multiplied: the first "
                             "has 3 columns");
  CHECK_THROWS_WITH_FRAGMENT(matmul(zeros({2, 3}), zeros({4})), ShapeError,
                             "has 4 rows (its only dim)");
  CHECK_THROWS_WITH_FRAGMENT(matmul(zeros({}), zeros({4})), ShapeError,
                             "need at least 1 dim, got shapes () and (4,)");
  CHECK_THROWS_WITH_FRAGMENT(matmul(zeros({2, 3, 4}), zeros({5, 4, 2})), ShapeError,
                             "batch dims of shapes (2, 3, 4) and (5, 4, 2)");
  CHECK_THROWS_WITH_FRAGMENT(matmul(zeros({2, 3}), zeros({3, 2}, kFloat64)), TypeError,
                             "[matmul] operands have different dtypes, float32 (2, 3)");
  CHECK_THROWS_WITH_FRAGMENT(matmul(zeros({2, 3}), Tensor()), ValueError,
                             "[matmul] second argument is an undefined tensor");
}

// ---- linear --------------------------------------------------------------------

namespace {

// y[row, o] = bias[o] + sum over i of x[row, i] weight[o, i], x's leading dims as rows.
std::vector<double> naive_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  int64_t in = weight.size(1), out = weight.size(0), rows = x.numel() / in;
  std::vector<double> xv = x.to_vector<double>(), wv = weight.to_vector<double>();
  std::vector<double> bv = bias.defined() ? bias.to_vector<double>() : std::vector<double>(out);
  std::vector<double> y(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      y[r * out + o] = bv[o];
      for (int64_t i = 0; i < in; ++i) y[r * out + o] += xv[r * in + i] * wv[o * in + i];
    }
  return y;
}

}  // namespace

TEST_CASE("linear: a hand-checked layer") {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = tensor({1, 0, -1, 0, 1, 0}, {2, 3});  // out 0: x0 - x2, out 1: x1
  Tensor b = tensor({10, 20}, {2});
  CHECK_CLOSE(linear(x, w, b), tensor({8, 22, 8, 25}, {2, 2}), 0, 1e-6);
  CHECK_CLOSE(linear(x, w), tensor({-2, 2, -2, 5}, {2, 2}), 0, 1e-6);
  CHECK_CLOSE(linear(tensor({1, 2, 3}, {3}), w, b), tensor({8, 22}, {2}), 0, 1e-6);
}

TEST_CASE("linear: gradients of the hand case") {
  // dy = 1: dx rows are the column sums of w, dw rows the column sums of x, db = rows.
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64).requires_grad_();
  Tensor w = tensor({1, 0, -1, 0, 1, 0}, {2, 3}, kFloat64).requires_grad_();
  Tensor b = tensor({10, 20}, {2}, kFloat64).requires_grad_();
  linear(x, w, b).backward(ones({2, 2}, kFloat64));
  CHECK_CLOSE(x.grad(), tensor({1, 1, -1, 1, 1, -1}, {2, 3}), 0, 1e-12);
  CHECK_CLOSE(w.grad(), tensor({5, 7, 9, 5, 7, 9}, {2, 3}), 0, 1e-12);
  CHECK_CLOSE(b.grad(), tensor({2, 2}, {2}), 0, 1e-12);
}

TEST_CASE("linear: matches loops for batched, transposed and stepped inputs") {
  struct Case {
    std::string name;
    MakeOperand x, weight;
    bool bias;
  };
  std::vector<Case> cases = {
      {"2-D with bias", dense({4, 5}), dense({3, 5}), true},
      {"3-D without bias", dense({2, 4, 5}), dense({3, 5}), false},
      {"transposed x and weight", transposed({4, 5}), transposed({3, 5}), true},
      {"stepped x", stepped({2, 3, 5}), dense({3, 5}), true},
      {"stepped weight", dense({4, 5}), stepped({3, 5}), true},
      {"1-D x", dense({5}), dense({3, 5}), true},
  };
  uint64_t seed = 10;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      INFO(c.name, " ", dtype_name(dtype));
      Generator gen(seed++);
      TensorOptions options{.dtype = dtype};
      Tensor x = c.x(gen, options), w = c.weight(gen, options);
      Tensor b = c.bias ? randn({w.size(0)}, options, &gen) : Tensor();
      Tensor y = linear(x, w, b);
      Shape y_sizes = x.sizes();
      y_sizes.back() = w.size(0);
      double tol = dtype == DType::Float32 ? 1e-5 : 1e-12;
      CHECK_CLOSE(y, as_tensor(naive_linear(x, w, b), y_sizes), tol, tol);
    }
  }
}

TEST_CASE("linear: gradcheck with and without bias") {
  Generator gen(11);
  Tensor x = randn({2, 3, 4}, kFloat64, &gen).requires_grad_();
  Tensor w = transposed({2, 4})(gen, kFloat64).requires_grad_();
  Tensor b = randn({2}, kFloat64, &gen).requires_grad_();
  GradcheckResult with_bias = gradcheck(
      [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
  CHECK_MESSAGE(with_bias.ok, with_bias.message);
  Tensor x2 = stepped({3, 4})(gen, kFloat64).requires_grad_();
  GradcheckResult without_bias =
      gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x2, w});
  CHECK_MESSAGE(without_bias.ok, without_bias.message);
}

TEST_CASE("linear: bad shapes") {
  Tensor x = zeros({8, 3}), w = zeros({4, 3});
  CHECK_THROWS_WITH_FRAGMENT(linear(x, zeros({4, 5})), ShapeError,
                             "[linear] input of shape (8, 3) has 3 features in its last dim but "
                             "weight (4, 5) expects 5");
  CHECK_THROWS_WITH_FRAGMENT(linear(x, zeros({3})), ShapeError,
                             "weight must be 2-D (out_features, in_features), got shape (3,)");
  CHECK_THROWS_WITH_FRAGMENT(linear(x, w, zeros({3})), ShapeError,
                             "[linear] bias must have shape (4,) to match weight (4, 3), got (3,)");
  CHECK_THROWS_WITH_FRAGMENT(linear(zeros({}), w), ShapeError, "got shape ()");
  CHECK_THROWS_WITH_FRAGMENT(linear(x, w, zeros({4}, kFloat64)), TypeError,
                             "[linear] operands have different dtypes");
}

}  // namespace loom
