// File: tests/core/ops/attention_test.cc
// scaled_dot_product_attention and attention_weights on the CPU: against a loop
// written here from the definition (float64 and float32, 2-d to 5-d, strided
// views, a given scale; Bool, added and causal masks broadcast at random, rows
// left with no key), float64 gradcheck on random configurations, dropout as
// loom::dropout draws it, and the errors.
//
// L query rows, S key rows, E the query/key width, F the value width.
#include "core/ops/attention.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

// softmax(q k^T * scale + bias) v for each leading index, in double, from the
// values alone; `bias` (..., L, S) holds each score's addend (-inf: masked out);
// a row with every score masked out gives zeros.
Tensor attention_by_loops(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                          const std::vector<double>& bias = {}) {
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
        p[j] = dot * scale + (bias.empty() ? 0.0 : bias[static_cast<size_t>((b * L + i) * S + j)]);
        m = std::max(m, p[j]);
      }
      for (int64_t j = 0; j < S; ++j) sum += (p[j] = m == -INFINITY ? 0.0 : std::exp(p[j] - m));
      for (int64_t d = 0; d < F; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += sum == 0 ? 0.0 : p[j] / sum * vv[(b * S + j) * F + d];
        y[(b * L + i) * F + d] = acc;
      }
    }
  }
  Shape sizes = q.sizes();
  sizes.back() = F;
  return tensor(y, sizes, {.dtype = DType::Float64});
}

// The addend of every score (..., L, S) that `options` describes for q and k.
std::vector<double> bias_of(const Tensor& q, const Tensor& k, const AttentionOptions& options) {
  const int64_t L = q.size(-2), S = k.size(-2);
  Shape scores(q.sizes().begin(), q.sizes().end() - 1);
  scores.push_back(S);
  int64_t count = 1;
  for (int64_t d : scores) count *= d;
  std::vector<double> bias(static_cast<size_t>(count), 0.0);
  if (options.is_causal) {
    for (size_t at = 0; at < bias.size(); ++at) {
      const int64_t i = static_cast<int64_t>(at) / S % L, j = static_cast<int64_t>(at) % S;
      if (j > i) bias[at] = -INFINITY;
    }
  } else if (options.attn_mask.defined()) {
    const std::vector<double> m = testing::values(options.attn_mask.expand(scores).contiguous());
    const bool keep = options.attn_mask.dtype() == DType::Bool;
    for (size_t at = 0; at < bias.size(); ++at) bias[at] = keep ? (m[at] != 0 ? 0.0 : -INFINITY) : m[at];
  }
  return bias;
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

struct Qkv {
  Tensor q, k, v;
};

// Normal q (..., L, E), k (..., S, E) and v (..., S, F) for `c`, drawn in that order.
Qkv draw(const Config& c, const TensorOptions& o, Generator& gen) {
  return {randn(with(c.batch, c.L, c.E), o, &gen), randn(with(c.batch, c.S, c.E), o, &gen),
          randn(with(c.batch, c.S, c.F), o, &gen)};
}

TEST_CASE("scaled_dot_product_attention matches the definition on random shapes, float64 and float32") {
  std::mt19937 rng(71);
  Generator gen(71);
  for (int trial = 0; trial < 40; ++trial) {
    const Config c = random_config(rng);
    for (DType dtype : {DType::Float64, DType::Float32}) {
      CAPTURE(trial);
      CAPTURE(dtype_name(dtype));
      const auto [q, k, v] = draw(c, {.dtype = dtype}, gen);
      const bool given = trial % 3 == 0;
      const double scale = given ? 0.3 : 1.0 / std::sqrt(static_cast<double>(c.E));
      const Tensor y = given ? scaled_dot_product_attention(q, k, v, {.scale = 0.3})
                            : scaled_dot_product_attention(q, k, v);
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
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, k, v, {.scale = INFINITY}), ValueError,
                             "scale must be finite");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, Tensor(), v), ValueError, "must be defined");
}

// A mask for q and k's scores (..., L, S): some leading dims dropped, some dims
// broadcast (size 1); Bool (about a third false, so some rows lose every key)
// or floating (normal, with some -inf).
Tensor random_mask(const Tensor& q, const Tensor& k, bool boolean, std::mt19937& rng, Generator& gen) {
  Shape scores(q.sizes().begin(), q.sizes().end() - 1);
  scores.push_back(k.size(-2));
  const size_t dropped = std::uniform_int_distribution<size_t>(0, scores.size() - 1)(rng);
  Shape shape(scores.begin() + static_cast<std::ptrdiff_t>(dropped), scores.end());
  for (int64_t& d : shape) d = rng() % 3 == 0 ? 1 : d;
  const Tensor u = rand(shape, {.dtype = DType::Float64}, &gen);
  if (boolean) return u > 0.33;
  return masked_fill(randn(shape, {.dtype = q.dtype()}, &gen), u < 0.2, -INFINITY);
}

TEST_CASE("scaled_dot_product_attention with a Bool or added mask, or causal, matches the definition") {
  std::mt19937 rng(74);
  Generator gen(74);
  int empty_rows = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const Config c = random_config(rng);
    for (DType dtype : {DType::Float64, DType::Float32}) {
      CAPTURE(trial);
      CAPTURE(dtype_name(dtype));
      const auto [q, k, v] = draw(c, {.dtype = dtype}, gen);
      AttentionOptions o;
      if (trial % 3 == 2) {
        o.is_causal = true;
      } else {
        o.attn_mask = random_mask(q, k, trial % 3 == 0, rng, gen);
      }
      CAPTURE(shape_str(o.attn_mask.defined() ? o.attn_mask.sizes() : Shape{}));
      const std::vector<double> bias = bias_of(q, k, o);
      const Tensor y = scaled_dot_product_attention(q, k, v, o);
      const Tensor want = attention_by_loops(q, k, v, 1.0 / std::sqrt(static_cast<double>(c.E)), bias);
      const double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;
      CHECK_CLOSE(y.to(DType::Float64), want, tol, tol);
      const Tensor w = attention_weights(q, k, o);
      const std::vector<double> sums = testing::values(sum(w.to(DType::Float64), {-1}));
      for (size_t row = 0; row < sums.size(); ++row) {
        const bool open = std::any_of(bias.begin() + static_cast<std::ptrdiff_t>(row * c.S),
                                      bias.begin() + static_cast<std::ptrdiff_t>((row + 1) * c.S),
                                      [](double b) { return b != -INFINITY; });
        empty_rows += open ? 0 : 1;
        CHECK(sums[row] == doctest::Approx(open ? 1.0 : 0.0).epsilon(1e-5));
      }
    }
  }
  CHECK(empty_rows > 0);  // the draw did reach rows with no key left
}

TEST_CASE("attention passes float64 gradcheck on random configurations: plain, masked, causal") {
  std::mt19937 rng(75);
  Generator gen(75);
  for (int trial = 0; trial < 20; ++trial) {
    CAPTURE(trial);
    Config c = random_config(rng);
    c.L = std::min<int64_t>(c.L, 4);
    c.S = std::min<int64_t>(c.S, 4);
    auto [q, k, v] = draw(c, {.dtype = DType::Float64}, gen);
    for (Tensor* leaf : {&q, &k, &v}) leaf->requires_grad_(true);
    // A given scale, a Bool mask (rows with no key left included), an added mask, causal.
    AttentionOptions options{.is_causal = trial % 4 == 3};
    if (trial % 4 == 0) options.scale = 0.7;
    if (trial % 4 == 1 || trial % 4 == 2) options.attn_mask = random_mask(q, k, trial % 4 == 1, rng, gen);
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], options); },
        {q, k, v});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("attention dropout drops the weights as loom::dropout does, from the given generator") {
  Generator gen(76);
  const Tensor q = randn({2, 3, 5, 4}, {}, &gen), k = randn({2, 3, 6, 4}, {}, &gen), v = randn({2, 3, 6, 2}, {}, &gen);
  const Tensor keep = rand({5, 6}, {}, &gen) > 0.2;
  Generator a(9), b(9), c(9);
  const Tensor y = scaled_dot_product_attention(q, k, v, {.attn_mask = keep, .dropout_p = 0.4, .generator = &a});
  const Tensor dropped = dropout(attention_weights(q, k, {.attn_mask = keep}), 0.4, true, &b);
  CHECK_CLOSE(y, matmul(dropped, v), 0, 0);
  CHECK_CLOSE(attention_weights(q, k, {.attn_mask = keep, .dropout_p = 0.4, .generator = &c}), dropped, 0, 0);
  CHECK(any(eq(dropped, 0.0) & (attention_weights(q, k, {.attn_mask = keep}) > 0)).item() != 0);
}

TEST_CASE("causal_blocked marks the keys past each query, as PyTorch's triu(ones(L, S), 1)") {
  const Tensor blocked = causal_blocked(3, 4);
  CHECK(blocked.dtype() == DType::Bool);
  CHECK(testing::values(blocked) == std::vector<double>{0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1});
  CHECK(causal_blocked(0, 2).sizes() == Shape{0, 2});
  CHECK_THROWS_WITH_FRAGMENT(causal_blocked(-1, 2), ValueError, "lengths must be >= 0");
}

TEST_CASE("attention names what is wrong with its mask and options") {
  const Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  const Tensor keep = ones({3, 5}, {.dtype = DType::Bool});
  CHECK(scaled_dot_product_attention(q, k, v, {.attn_mask = keep}).sizes() == Shape{2, 3, 6});
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, k, v, {.attn_mask = keep, .is_causal = true}),
                             ValueError, "attn_mask or is_causal, not both");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({5, 3}, {.dtype = DType::Bool})}),
                             ShapeError, "(5, 3) does not broadcast to the scores' (2, 3, 5)");
  CHECK_THROWS_WITH_FRAGMENT(
      scaled_dot_product_attention(q, k, v, {.attn_mask = ones({3, 5}, {.dtype = DType::Int64})}), TypeError,
      "attn_mask must be Bool");
  CHECK_THROWS_WITH_FRAGMENT(scaled_dot_product_attention(q, k, v, {.dropout_p = 1.0}), ValueError,
                             "dropout_p must be in [0, 1)");
  CHECK_THROWS_WITH_FRAGMENT(attention_weights(q, zeros({2, 5, 3})), ShapeError, "[attention_weights]");
}

}  // namespace
}  // namespace loom
