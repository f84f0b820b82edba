// File: tests/core/ops/attention_test.cc
// scaled_dot_product_attention on the CPU: against a loop written here from the
// definition (float64 and float32, 2-d to 5-d, strided views, a given scale),
// float64 gradcheck on random configurations, and its errors.
//
// L query rows, S key rows, E the query/key width, F the value width.
#include "core/ops/attention.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

// softmax(q k^T * scale) v for each leading index, in double, from the values alone.
Tensor attention_by_loops(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), F = v.size(-1);
  const int64_t batch = q.numel() / (L * E);
  const std::vector<double> qv = testing::values(q), kv = testing::values(k), vv = testing::values(v);
  std::vector<double> y(static_cast<size_t>(batch * L * F));
  std::vector<double> p(static_cast<size_t>(S));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
        p[j] = dot * scale;
        m = std::max(m, p[j]);
      }
      for (int64_t j = 0; j < S; ++j) sum += (p[j] = std::exp(p[j] - m));
      for (int64_t d = 0; d < F; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += p[j] / sum * vv[(b * S + j) * F + d];
        y[(b * L + i) * F + d] = acc;
      }
    }
  }
  Shape sizes = q.sizes();
  sizes.back() = F;
  return tensor(y, sizes, {.dtype = DType::Float64});
}

struct Config {
  Shape batch;
  int64_t L, S, E, F;
};

Config random_config(std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Config c{.L = pick(1, 9), .S = pick(1, 9), .E = pick(1, 8), .F = pick(1, 8)};
  const int64_t dims = pick(0, 3);
  for (int64_t i = 0; i < dims; ++i) c.batch.push_back(pick(1, 3));
  return c;
}

Shape with(Shape batch, int64_t rows, int64_t width) {
  batch.push_back(rows);
  batch.push_back(width);
  return batch;
}

TEST_CASE("scaled_dot_product_attention matches the definition on random shapes, float64 and float32") {
  std::mt19937 rng(71);
  Generator gen(71);
  for (int trial = 0; trial < 40; ++trial) {
    const Config c = random_config(rng);
    for (DType dtype : {DType::Float64, DType::Float32}) {
      CAPTURE(trial);
      CAPTURE(dtype_name(dtype));
      const Tensor q = randn(with(c.batch, c.L, c.E), {.dtype = dtype}, &gen);
      const Tensor k = randn(with(c.batch, c.S, c.E), {.dtype = dtype}, &gen);
      const Tensor v = randn(with(c.batch, c.S, c.F), {.dtype = dtype}, &gen);
      const bool given = trial % 3 == 0;
      const double scale = given ? 0.3 : 1.0 / std::sqrt(static_cast<double>(c.E));
      const Tensor y = given ? scaled_dot_product_attention(q, k, v, 0.3) : scaled_dot_product_attention(q, k, v);
      CHECK(y.dtype() == dtype);
      const double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;
      CHECK_CLOSE(y.to(DType::Float64), attention_by_loops(q, k, v, scale), tol, tol);
    }
  }
}

TEST_CASE("scaled_dot_product_attention reads strided views: heads permuted out of a packed projection") {
  Generator gen(72);
  const int64_t n = 3, s = 5, heads = 2, d = 4, e = heads * d;
  const Tensor qkv = randn({n, s, 3 * e}, {.dtype = DType::Float64}, &gen);
  auto head_view = [&](int64_t part) {
    return qkv.narrow(2, part * e, e).reshape({n, s, heads, d}).permute({0, 2, 1, 3});
  };
  const Tensor q = head_view(0), k = head_view(1), v = head_view(2);
  CHECK_FALSE(q.is_contiguous());
  CHECK_CLOSE(scaled_dot_product_attention(q, k, v),
              attention_by_loops(q.contiguous(), k.contiguous(), v.contiguous(), 0.5), 1e-12, 1e-12);
}

TEST_CASE("scaled_dot_product_attention passes float64 gradcheck on random configurations") {
  std::mt19937 rng(73);
  Generator gen(73);
  for (int trial = 0; trial < 12; ++trial) {
    CAPTURE(trial);
    Config c = random_config(rng);
    c.L = std::min<int64_t>(c.L, 5);
    c.S = std::min<int64_t>(c.S, 5);
    const TensorOptions o = {.dtype = DType::Float64};
    const Tensor q = randn(with(c.batch, c.L, c.E), o, &gen).requires_grad_(true);
    const Tensor k = randn(with(c.batch, c.S, c.E), o, &gen).requires_grad_(true);
    const Tensor v = randn(with(c.batch, c.S, c.F), o, &gen).requires_grad_(true);
    const GradcheckResult r = gradcheck(
        [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], 0.7); },
        {q, k, v});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("scaled_dot_product_attention names what is wrong with its operands") {
  const Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  CHECK(scaled_dot_product_attention(q, k, v).sizes() == Shape{2, 3, 6});
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, zeros({2, 5, 3}), v), ShapeError,
                             "expects q (..., L, E), k (..., S, E) and v (..., S, F)");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, k, zeros({2, 4, 6})), ShapeError, "(2, 4, 6)");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, zeros({1, 5, 4}), v), ShapeError,
                             "expand() a shared k or v");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, zeros({5, 4}), v), ShapeError,
                             "the same number of dims");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, k, v.to(DType::Float64)), TypeError,
                             "must share a dtype");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(zeros({4}), zeros({4}), zeros({4})), ShapeError,
                             "at least 2");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, k, v, INFINITY), ValueError, "scale must be finite");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, Tensor(), v), ValueError, "must be defined");
}

}  // namespace
}  // namespace loom
