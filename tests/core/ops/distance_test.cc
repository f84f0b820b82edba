// File: tests/core/ops/distance_test.cc
// vector_norm, cosine_similarity, pairwise_distance and cdist against float64 formulas
// written out element by element over random shapes, dims, ords and
// broadcasts; their gradients by gradcheck; PyTorch's gradients where the
// formulas have none (zero norms, zero elements, ties at inf); errors.
#include "core/ops/distance.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/compare.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kOrds[] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, kInf, -kInf};

// The row-major index of x's element `flat` with the dims in `reduced` set to 0:
// which output element it reduces into (in x's rank, keepdim).
int64_t group_of(int64_t flat, const Shape& sizes, const std::vector<bool>& reduced) {
  int64_t group = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    const int64_t coordinate = flat % sizes[d];
    flat /= sizes[d];
    if (!reduced[d]) group += coordinate * stride;
    stride *= reduced[d] ? 1 : sizes[d];
  }
  return group;
}

// torch.linalg.vector_norm's definition over the dims marked in `reduced`.
std::vector<double> norm_by_hand(const std::vector<double>& x, const Shape& sizes, const std::vector<bool>& reduced,
                                 double ord) {
  int64_t groups = 1;
  for (size_t d = 0; d < sizes.size(); ++d) groups *= reduced[d] ? 1 : sizes[d];
  const double start = ord == kInf ? 0.0 : ord == -kInf ? kInf : 0.0;
  std::vector<double> acc(groups, start);
  for (size_t i = 0; i < x.size(); ++i) {
    double& a = acc[group_of(static_cast<int64_t>(i), sizes, reduced)];
    const double v = std::fabs(x[i]);
    if (ord == kInf) {
      a = std::max(a, v);
    } else if (ord == -kInf) {
      a = std::min(a, v);
    } else if (ord == 0.0) {
      a += v != 0.0;
    } else {
      a += std::pow(v, ord);
    }
  }
  if (!std::isinf(ord) && ord != 0.0) {
    for (double& a : acc) a = std::pow(a, 1.0 / ord);
  }
  return acc;
}

TEST_CASE("vector_norm matches its definition over random shapes, dims and ords") {
  Generator gen(71);
  for (int trial = 0; trial < 60; ++trial) {
    CAPTURE(trial);
    const int64_t rank = 1 + trial % 4;
    Shape sizes;
    for (int64_t d = 0; d < rank; ++d) sizes.push_back(1 + static_cast<int64_t>(rand({1}, {}, &gen).item() * 4));
    Shape dims;
    std::vector<bool> reduced(rank, false);
    for (int64_t d = 0; d < rank; ++d) {
      if (rand({1}, {}, &gen).item() < 0.5) continue;
      dims.push_back(rand({1}, {}, &gen).item() < 0.5 ? d : d - rank);  // negative dims too
      reduced[d] = true;
    }
    if (dims.empty()) reduced.assign(rank, true);  // no dims: every dim
    const double ord = kOrds[trial % 8];
    const bool keepdim = trial % 3 == 0;
    CAPTURE(shape_str(sizes));
    CAPTURE(shape_str(dims));
    CAPTURE(ord);
    Tensor x = randn(sizes, kF64, &gen);
    if (trial % 5 == 0) x = masked_fill(x, le(x, 0.3), 0.0);  // zeros among the values
    const Tensor norm = vector_norm(x, ord, dims, keepdim);
    Shape expected_sizes;
    for (int64_t d = 0; d < rank; ++d) {
      if (!reduced[d] || keepdim) expected_sizes.push_back(reduced[d] ? 1 : sizes[d]);
    }
    CHECK(norm.sizes() == expected_sizes);
    CHECK(norm.dtype() == DType::Float64);
    const std::vector<double> expected = norm_by_hand(x.to_vector<double>(), sizes, reduced, ord);
    CHECK_CLOSE(norm, tensor(expected, expected_sizes, kF64), 1e-13, 1e-15);
    const Tensor x32 = x.to(DType::Float32);
    CHECK_CLOSE(vector_norm(x32, ord, dims, keepdim), tensor(expected, expected_sizes), 1e-5, 1e-6);
  }
}

TEST_CASE("vector_norm's gradient passes gradcheck for every ord, dims and keepdim") {
  Generator gen(72);
  for (double ord : {0.5, 1.0, 1.5, 2.0, 3.0, kInf, -kInf}) {
    for (const Shape& dims : {Shape{}, Shape{1}, Shape{0, 2}, Shape{-1}}) {
      CAPTURE(ord);
      CAPTURE(shape_str(dims));
      // Values away from 0 (the kink of |x|) and with no ties at the extremes.
      Tensor x = randn({3, 4, 2}, kF64, &gen);
      x = add(x, mul(sign(x), 0.2)).detach().requires_grad_(true);
      const bool keepdim = dims.size() == 1;
      const GradcheckResult result =
          gradcheck([&](const std::vector<Tensor>& in) { return vector_norm(in[0], ord, dims, keepdim); }, {x});
      CHECK_MESSAGE(result.ok, result.message);
    }
  }
}

TEST_CASE("vector_norm's gradient where the formula has none is PyTorch's") {
  SUBCASE("a zero vector: 0, not NaN, for every ord") {
    for (double ord : kOrds) {
      CAPTURE(ord);
      Tensor x = zeros({2, 3}, {.dtype = DType::Float64, .requires_grad = true});
      vector_norm(x, ord, {1}).backward(ones({2}, kF64));
      CHECK(x.grad().to_vector<double>() == std::vector<double>(6, 0.0));
    }
  }
  SUBCASE("p < 1: zero elements get 0, the others |x|^(p-1) sign(x) / norm^(p-1)") {
    Tensor x = tensor({0.0, 4.0, -1.0}, {3}, {.dtype = DType::Float64, .requires_grad = true});
    const Tensor norm = vector_norm(x, 0.5);
    const double n = std::pow(2.0 + 1.0, 2.0);
    CHECK(norm.item() == doctest::Approx(n).epsilon(1e-14));
    norm.backward();
    const double scale = 1.0 / std::pow(n, -0.5);
    CHECK_CLOSE(x.grad(), tensor({0.0, std::pow(4.0, -0.5) * scale, -scale}, {3}, kF64), 1e-14, 1e-15);
  }
  SUBCASE("inf and -inf: ties share the gradient evenly, with the sign of x") {
    Tensor x = tensor({3.0, -3.0, 1.0, 2.0}, {4}, {.dtype = DType::Float64, .requires_grad = true});
    vector_norm(x, kInf).backward(tensor({2.0}, {}, kF64));
    CHECK(x.grad().to_vector<double>() == std::vector<double>{1.0, -1.0, 0.0, 0.0});
    Tensor y = tensor({1.0, -1.0, 5.0}, {3}, {.dtype = DType::Float64, .requires_grad = true});
    vector_norm(y, -kInf).backward();
    CHECK(y.grad().to_vector<double>() == std::vector<double>{0.5, -0.5, 0.0});
  }
  SUBCASE("ord 0 counts and carries no gradient") {
    Tensor x = tensor({0.0, 2.0, -1.0, 0.0}, {2, 2}, {.dtype = DType::Float64, .requires_grad = true});
    const Tensor count = vector_norm(x, 0.0, {1});
    CHECK(count.to_vector<double>() == std::vector<double>{1.0, 1.0});
    sum(count).backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>(4, 0.0));
  }
}

TEST_CASE("vector_norm: empty reductions and errors") {
  CHECK(vector_norm(zeros({2, 0}), 2.0, {1}).to_vector<double>() == std::vector<double>{0.0, 0.0});
  CHECK(vector_norm(zeros({0})).item() == 0.0);
  CHECK_THROWS_WITH_FRAGMENT(vector_norm(zeros({2, 0}), kInf, {1}), ValueError, "empty reduction");
  CHECK_THROWS_WITH_FRAGMENT(vector_norm(zeros({0, 3}), -kInf), ValueError, "empty reduction");
  // Non-empty reduced dims of an empty x: an empty result, with its gradient.
  for (const double ord : {kInf, -kInf, 2.0}) {
    CAPTURE(ord);
    const Tensor x = zeros({0, 3}).requires_grad_(true);
    const Tensor norm = vector_norm(x, ord, {1});
    CHECK(norm.sizes() == Shape{0});
    CHECK(vector_norm(x, ord, {1}, true).sizes() == Shape{0, 1});
    sum(norm).backward();
    CHECK(x.grad().sizes() == Shape{0, 3});
  }
  CHECK_THROWS_WITH_FRAGMENT(vector_norm(ones({3}), -1.0), ValueError, "ord must be >= 0, inf or -inf, got -1");
  CHECK_THROWS_AS(vector_norm(ones({3}, {.dtype = DType::Int64})), TypeError);
  CHECK_THROWS_AS(vector_norm(ones({3}), 2.0, {1}), IndexError);
  CHECK_THROWS_WITH_FRAGMENT(vector_norm(ones({3, 2}), 2.0, {1, -1}), ValueError, "appears twice");
}

// F.cosine_similarity's formula for (rows, d) operands along dim 1, in float64.
std::vector<double> cosine_by_hand(const std::vector<double>& a, const std::vector<double>& b, int64_t rows,
                                   int64_t d, double eps) {
  std::vector<double> out(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double aa = 0, bb = 0;
    for (int64_t k = 0; k < d; ++k) {
      aa += a[r * d + k] * a[r * d + k];
      bb += b[r * d + k] * b[r * d + k];
    }
    const double na = std::max(std::sqrt(aa), eps), nb = std::max(std::sqrt(bb), eps);
    for (int64_t k = 0; k < d; ++k) out[r] += (a[r * d + k] / na) * (b[r * d + k] / nb);
  }
  return out;
}

TEST_CASE("cosine_similarity matches its formula over random shapes, dims and broadcasts") {
  Generator gen(73);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t rows = 1 + trial % 5, d = 1 + (trial * 7) % 9;
    CAPTURE(rows);
    CAPTURE(d);
    const Tensor a = randn({rows, d}, kF64, &gen);
    const Tensor b = trial % 3 == 0 ? randn({1, d}, kF64, &gen) : randn({rows, d}, kF64, &gen);
    const Tensor b_full = b.expand({rows, d}).contiguous();
    const std::vector<double> expected =
        cosine_by_hand(a.to_vector<double>(), b_full.to_vector<double>(), rows, d, 1e-8);
    CHECK_CLOSE(cosine_similarity(a, b), tensor(expected, {rows}, kF64), 1e-13, 1e-15);
    // Along dim 0 of the transposed operands: the same values.
    CHECK_CLOSE(cosine_similarity(a.t(), b_full.t(), 0), tensor(expected, {rows}, kF64), 1e-13, 1e-15);
    CHECK_CLOSE(cosine_similarity(a.to(DType::Float32), b.to(DType::Float32), -1), tensor(expected, {rows}), 1e-5,
                1e-6);
  }
  const Tensor x = randn({4, 3, 5, 5}, kF64, &gen);
  CHECK_CLOSE(cosine_similarity(x, mul(x, 3.0)), ones({4, 5, 5}, kF64), 1e-14, 1e-15);
  CHECK_CLOSE(cosine_similarity(x, neg(x)), full({4, 5, 5}, -1.0, kF64), 1e-14, 1e-15);
  CHECK(cosine_similarity(x.to(DType::Float32), x).dtype() == DType::Float64);  // promoted
}

TEST_CASE("cosine_similarity: gradients, zero vectors and errors") {
  Generator gen(74);
  const Tensor a = randn({3, 6}, kF64, &gen).requires_grad_(true);
  const Tensor b = randn({3, 6}, kF64, &gen).requires_grad_(true);
  const Tensor row = randn({1, 6}, kF64, &gen).requires_grad_(true);
  for (int64_t dim : {0, 1}) {
    CAPTURE(dim);
    const GradcheckResult result =
        gradcheck([&](const std::vector<Tensor>& in) { return cosine_similarity(in[0], in[1], dim); }, {a, b});
    CHECK_MESSAGE(result.ok, result.message);
  }
  const GradcheckResult broadcast =
      gradcheck([](const std::vector<Tensor>& in) { return cosine_similarity(in[0], in[1]); }, {a, row});
  CHECK_MESSAGE(broadcast.ok, broadcast.message);

  // A zero vector: similarity 0; PyTorch's gradient, x2 / (eps * |x2|), finite.
  Tensor zero = zeros({1, 3}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor other = tensor({3.0, 0.0, 4.0}, {1, 3}, kF64);
  const Tensor s = cosine_similarity(zero, other, 1, 1e-3);
  CHECK(s.item() == 0.0);
  s.backward();
  CHECK_CLOSE(zero.grad(), tensor({0.6 / 1e-3, 0.0, 0.8 / 1e-3}, {1, 3}, kF64), 1e-12, 0);

  CHECK_THROWS_AS(cosine_similarity(ones({2, 3}), ones({2, 4})), ShapeError);
  CHECK_THROWS_AS(cosine_similarity(ones({2, 3}), ones({2, 3}), 2), IndexError);
  CHECK_THROWS_AS(cosine_similarity(ones({2, 3}, {.dtype = DType::Int64}), ones({2, 3})), TypeError);
}

TEST_CASE("pairwise_distance matches its formula and PyTorch's eps, with finite gradients at equal rows") {
  Generator gen(75);
  const Tensor a = randn({4, 5}, kF64, &gen), b = randn({4, 5}, kF64, &gen);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  for (double p : {1.0, 2.0, 3.0, kInf}) {
    CAPTURE(p);
    std::vector<double> diff(av.size());
    for (size_t i = 0; i < av.size(); ++i) diff[i] = av[i] - bv[i] + 1e-6;
    const std::vector<double> expected = norm_by_hand(diff, {4, 5}, {false, true}, p);
    CHECK_CLOSE(pairwise_distance(a, b, p), tensor(expected, {4}, kF64), 1e-13, 1e-15);
    CHECK_CLOSE(pairwise_distance(a, b, p, 1e-6, true), tensor(expected, {4, 1}, kF64), 1e-13, 1e-15);
  }
  // Broadcast over rows, and a batch of matrices reduced along the last dim.
  CHECK(pairwise_distance(randn({2, 3, 5}, kF64, &gen), randn({5}, kF64, &gen)).sizes() == Shape{2, 3});
  const Tensor x = randn({3, 4}, kF64, &gen).requires_grad_(true);
  const Tensor y = randn({3, 4}, kF64, &gen).requires_grad_(true);
  const GradcheckResult result =
      gradcheck([](const std::vector<Tensor>& in) { return pairwise_distance(in[0], in[1]); }, {x, y});
  CHECK_MESSAGE(result.ok, result.message);
  Tensor same = ones({2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  sum(pairwise_distance(same, ones({2, 3}, kF64))).backward();
  for (double g : same.grad().to_vector<double>()) CHECK(g == doctest::Approx(1.0 / std::sqrt(3.0)));
  CHECK_THROWS_AS(pairwise_distance(ones({2, 3}), ones({2, 4})), ShapeError);
}

// torch.cdist's definition for (rows1, m) and (rows2, m) values.
std::vector<double> cdist_by_hand(const std::vector<double>& a, const std::vector<double>& b, int64_t rows1,
                                  int64_t rows2, int64_t m, double p) {
  std::vector<double> out;
  for (int64_t i = 0; i < rows1; ++i) {
    for (int64_t j = 0; j < rows2; ++j) {
      std::vector<double> difference(m);
      for (int64_t k = 0; k < m; ++k) difference[k] = a[i * m + k] - b[j * m + k];
      out.push_back(norm_by_hand(difference, {m}, {true}, p)[0]);
    }
  }
  return out;
}

TEST_CASE("cdist matches its definition for every p, both of PyTorch's paths and broadcast batches") {
  Generator gen(76);
  for (int trial = 0; trial < 24; ++trial) {
    const double p = kOrds[trial % 8] < 0 ? 2.0 : kOrds[trial % 8];
    // Up to 25 rows the differences path; above, p = 2 takes the matrix product.
    const int64_t rows1 = trial % 3 == 0 ? 30 : 1 + trial % 6, rows2 = 1 + (trial * 5) % 7, m = 1 + trial % 4;
    CAPTURE(p);
    CAPTURE(rows1);
    const Tensor a = randn({2, rows1, m}, kF64, &gen), b = randn({2, rows2, m}, kF64, &gen);
    std::vector<double> expected;
    for (int64_t batch = 0; batch < 2; ++batch) {
      const std::vector<double> part = cdist_by_hand(a.select(0, batch).contiguous().to_vector<double>(),
                                                     b.select(0, batch).contiguous().to_vector<double>(), rows1,
                                                     rows2, m, p);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    const Tensor d = cdist(a, b, p);
    CHECK(d.sizes() == Shape{2, rows1, rows2});
    CHECK_CLOSE(d, tensor(expected, {2, rows1, rows2}, kF64), 1e-12, 1e-9);  // the product path cancels
    // One x2 for both batches of x1: broadcast.
    CHECK_CLOSE(cdist(a, b.select(0, 1), p).select(0, 1), d.select(0, 1), 1e-12, 1e-12);
  }
  // Without rows or features: empty, or zeros, for every p.
  CHECK(cdist(zeros({0, 3}), zeros({4, 3}), kInf).sizes() == Shape{0, 4});
  CHECK(cdist(zeros({2, 0}), zeros({3, 0}), kInf).to_vector<double>() == std::vector<double>(6, 0.0));
}

TEST_CASE("cdist: gradients on both paths, 0 at zero distances, errors") {
  Generator gen(77);
  for (const int64_t rows1 : {4, 27}) {
    for (double p : {1.0, 2.0, 3.0, kInf}) {
      CAPTURE(rows1);
      CAPTURE(p);
      const Tensor a = randn({rows1, 3}, kF64, &gen).requires_grad_(true);
      const Tensor b = randn({5, 3}, kF64, &gen).requires_grad_(true);
      const GradcheckResult result =
          gradcheck([p](const std::vector<Tensor>& in) { return cdist(in[0], in[1], p); }, {a, b});
      CHECK_MESSAGE(result.ok, result.message);
    }
  }
  // A row of x1 equal to a row of x2: that distance is 0 and adds nothing to the gradient.
  Tensor a = tensor({1.0, 2.0, 0.0, 0.0}, {2, 2}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor b = tensor({1.0, 2.0}, {1, 2}, kF64);
  const Tensor d = cdist(a, b);
  CHECK(d.to_vector<double>() == std::vector<double>{0.0, std::sqrt(5.0)});
  sum(d).backward();
  CHECK_CLOSE(a.grad(), tensor({0.0, 0.0, -1.0 / std::sqrt(5.0), -2.0 / std::sqrt(5.0)}, {2, 2}, kF64), 1e-15, 0);
  CHECK_THROWS_WITH_FRAGMENT(cdist(ones({3}), ones({2, 3})), ShapeError, "at least 2-D");
  CHECK_THROWS_WITH_FRAGMENT(cdist(ones({2, 3}), ones({2, 4})), ShapeError, "as many features");
  CHECK_THROWS_WITH_FRAGMENT(cdist(ones({2, 3}), ones({2, 3}), -1.0), ValueError, "p must be >= 0");
}

TEST_CASE("lp_normalize (F.normalize) divides by the norm raised to eps, over random shapes, dims and p") {
  Generator gen(77);
  const double kPs[] = {1.0, 1.5, 2.0, 3.0, kInf};
  for (int trial = 0; trial < 30; ++trial) {
    CAPTURE(trial);
    const int64_t rank = 1 + trial % 4;
    Shape sizes;
    for (int64_t d = 0; d < rank; ++d) sizes.push_back(1 + static_cast<int64_t>(rand({1}, {}, &gen).item() * 4));
    const int64_t dim = static_cast<int64_t>(rand({1}, {}, &gen).item() * rank) - (trial % 2 == 0 ? rank : 0);
    const double p = kPs[trial % 5], eps = trial % 3 == 0 ? 0.5 : 1e-12;
    CAPTURE(shape_str(sizes));
    CAPTURE(dim);
    CAPTURE(p);
    Tensor x = randn(sizes, kF64, &gen);
    if (trial % 4 == 0) x = masked_fill(x, le(x, 0.5), 0.0);  // zero rows among the values
    std::vector<bool> reduced(rank, false);
    reduced[dim < 0 ? dim + rank : dim] = true;
    const std::vector<double> norms = norm_by_hand(x.to_vector<double>(), sizes, reduced, p);
    std::vector<double> expected = x.to_vector<double>();
    for (size_t i = 0; i < expected.size(); ++i) {
      expected[i] /= std::max(norms[group_of(static_cast<int64_t>(i), sizes, reduced)], eps);
    }
    CHECK_CLOSE(lp_normalize(x, p, dim, eps), tensor(expected, sizes, kF64), 1e-13, 1e-15);
    x.requires_grad_(true);
    const GradcheckResult result = gradcheck([&](const std::vector<Tensor>& in) {
      return lp_normalize(in[0], p, dim, eps);
    }, {x});
    CHECK_MESSAGE(result.ok, result.message);
  }
  const Tensor rows = tensor({3, 4, 0, 0}, {2, 2}, kF64).requires_grad_(true);
  const Tensor unit = lp_normalize(rows);
  CHECK_CLOSE(unit, tensor({0.6, 0.8, 0, 0}, {2, 2}, kF64), 1e-15, 0);
  sum(unit).backward();
  for (double g : rows.grad().to_vector<double>()) CHECK(std::isfinite(g));  // the zero row's too
  CHECK_THROWS_AS(lp_normalize(tensor({1, 2}, {2}, {.dtype = DType::Int64})), TypeError);
}

}  // namespace
}  // namespace loom
