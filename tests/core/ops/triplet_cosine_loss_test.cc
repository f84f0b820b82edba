// File: tests/core/ops/triplet_cosine_loss_test.cc
// triplet_margin_loss and cosine_embedding_loss against PyTorch's formulas
// written out element by element over random batches, every option and
// reduction; gradcheck; the hinge's gradient; shapes and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};
constexpr Reduction kReductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};

// Row r of (rows, d) values.
std::vector<double> row(const std::vector<double>& x, int64_t r, int64_t d) {
  return {x.begin() + r * d, x.begin() + (r + 1) * d};
}

// pairwise_distance's p-norm of a - b + eps.
double distance(const std::vector<double>& a, const std::vector<double>& b, double p, double eps) {
  double total = 0;
  for (size_t k = 0; k < a.size(); ++k) total += std::pow(std::fabs(a[k] - b[k] + eps), p);
  return std::pow(total, 1.0 / p);
}

Tensor reduced(const std::vector<double>& losses, Reduction reduction) {
  const auto n = static_cast<int64_t>(losses.size());
  double total = 0;
  for (double v : losses) total += v;
  switch (reduction) {
    case Reduction::None: return tensor(losses, {n}, kF64);
    case Reduction::Sum: return tensor({total}, {}, kF64);
    default: return tensor({total / static_cast<double>(n)}, {}, kF64);
  }
}

TEST_CASE("triplet_margin_loss matches PyTorch's formula for every option and reduction") {
  Generator gen(91);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t n = 1 + trial % 6, d = 2 + trial % 5;
    const TripletMarginOptions o{.margin = trial % 2 ? 1.0 : 0.3,
                                 .p = trial % 3 == 0 ? 1.0 : trial % 3 == 1 ? 2.0 : 3.0,
                                 .eps = 1e-6,
                                 .swap = trial % 4 >= 2,
                                 .reduction = kReductions[trial % 3]};
    CAPTURE(trial);
    const Tensor a = randn({n, d}, kF64, &gen), p = randn({n, d}, kF64, &gen), ng = randn({n, d}, kF64, &gen);
    const std::vector<double> av = a.to_vector<double>(), pv = p.to_vector<double>(), nv = ng.to_vector<double>();
    std::vector<double> losses(n);
    for (int64_t r = 0; r < n; ++r) {
      const double to_positive = distance(row(av, r, d), row(pv, r, d), o.p, o.eps);
      double to_negative = distance(row(av, r, d), row(nv, r, d), o.p, o.eps);
      if (o.swap) to_negative = std::min(to_negative, distance(row(pv, r, d), row(nv, r, d), o.p, o.eps));
      losses[r] = std::max(to_positive - to_negative + o.margin, 0.0);
    }
    CHECK_CLOSE(triplet_margin_loss(a, p, ng, o), reduced(losses, o.reduction), 1e-13, 1e-15);
  }
  // One (D) sample gives a 0-D loss; a (1, D) anchor broadcasts over the batch.
  const Tensor a = randn({4}, kF64, &gen), p = randn({4}, kF64, &gen), ng = randn({4}, kF64, &gen);
  CHECK(triplet_margin_loss(a, p, ng, {.reduction = Reduction::None}).dim() == 0);
  const Tensor batch = randn({3, 4}, kF64, &gen);
  CHECK(triplet_margin_loss(a.view({1, 4}), batch, randn({3, 4}, kF64, &gen), {.reduction = Reduction::None}).sizes() ==
        Shape{3});
}

TEST_CASE("triplet_margin_loss: gradcheck, no gradient past the hinge, errors") {
  Generator gen(92);
  const Tensor a = randn({3, 5}, kF64, &gen).requires_grad_(true);
  const Tensor p = randn({3, 5}, kF64, &gen).requires_grad_(true);
  const Tensor ng = randn({3, 5}, kF64, &gen).requires_grad_(true);
  for (bool swap : {false, true}) {
    CAPTURE(swap);
    const GradcheckResult result = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return triplet_margin_loss(in[0], in[1], in[2], {.margin = 2.0, .swap = swap, .reduction = Reduction::Sum});
        },
        {a, p, ng});
    CHECK_MESSAGE(result.ok, result.message);
  }
  // The negative far away: every loss is 0 and so is every gradient.
  Tensor anchor = zeros({2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  triplet_margin_loss(anchor, zeros({2, 3}, kF64), full({2, 3}, 10.0, kF64)).backward();
  CHECK(anchor.grad().to_vector<double>() == std::vector<double>(6, 0.0));

  CHECK_THROWS_WITH_FRAGMENT(triplet_margin_loss(ones({2, 3}), ones({3}), ones({2, 3})), ShapeError, "one rank");
  CHECK_THROWS_AS(triplet_margin_loss(ones({2, 3, 4}), ones({2, 3, 4}), ones({2, 3, 4})), ShapeError);
  CHECK_THROWS_AS(triplet_margin_loss(ones({2, 3}), ones({2, 3}), ones({2, 3}), {.reduction = Reduction::BatchMean}),
                  ValueError);
}

TEST_CASE("cosine_embedding_loss matches PyTorch's formula for every margin, target and reduction") {
  Generator gen(93);
  for (int trial = 0; trial < 18; ++trial) {
    const int64_t n = 1 + trial % 5, d = 1 + trial % 7;
    const CosineEmbeddingOptions o{.margin = trial % 3 == 0 ? 0.0 : trial % 3 == 1 ? 0.5 : -0.2,
                                   .reduction = kReductions[trial % 3]};
    CAPTURE(trial);
    const Tensor x1 = randn({n, d}, kF64, &gen), x2 = randn({n, d}, kF64, &gen);
    std::vector<double> targets(n);
    for (int64_t r = 0; r < n; ++r) targets[r] = (r + trial) % 3 == 0 ? 1.0 : (r + trial) % 3 == 1 ? -1.0 : 0.0;
    const std::vector<double> a = x1.to_vector<double>(), b = x2.to_vector<double>();
    std::vector<double> losses(n);
    for (int64_t r = 0; r < n; ++r) {
      double dot = 0, aa = 0, bb = 0;
      for (int64_t k = 0; k < d; ++k) {
        dot += a[r * d + k] * b[r * d + k];
        aa += a[r * d + k] * a[r * d + k];
        bb += b[r * d + k] * b[r * d + k];
      }
      const double cos = dot / std::sqrt((aa + 1e-12) * (bb + 1e-12));
      losses[r] = targets[r] == 1.0 ? 1.0 - cos : targets[r] == -1.0 ? std::max(cos - o.margin, 0.0) : 0.0;
    }
    const Tensor expected = reduced(losses, o.reduction);
    CHECK_CLOSE(cosine_embedding_loss(x1, x2, tensor(targets, {n}, kF64), o), expected, 1e-13, 1e-15);
    // An integer target gives the same losses.
    CHECK_CLOSE(cosine_embedding_loss(x1, x2, tensor(targets, {n}, {.dtype = DType::Int64}), o), expected, 1e-13,
                1e-15);
  }
  const Tensor v = tensor({3.0, 4.0}, {2}, kF64);
  CHECK(cosine_embedding_loss(v, v, tensor({1.0}, {}, kF64)).item() == doctest::Approx(0.0).scale(1.0));
  CHECK(cosine_embedding_loss(v, v, tensor({-1.0}, {}, kF64), {.margin = 0.5}).item() ==
        doctest::Approx(0.5).epsilon(1e-12));
}

TEST_CASE("cosine_embedding_loss: gradcheck, zero vectors stay finite, errors") {
  Generator gen(94);
  const Tensor x1 = randn({4, 6}, kF64, &gen).requires_grad_(true);
  const Tensor x2 = randn({4, 6}, kF64, &gen).requires_grad_(true);
  const Tensor target = tensor({1.0, -1.0, 1.0, -1.0}, {4}, kF64);
  const GradcheckResult result = gradcheck(
      [&](const std::vector<Tensor>& in) { return cosine_embedding_loss(in[0], in[1], target, {.margin = -0.9}); },
      {x1, x2});
  CHECK_MESSAGE(result.ok, result.message);

  Tensor zero = zeros({2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor loss = cosine_embedding_loss(zero, ones({2, 3}, kF64), tensor({1.0, 1.0}, {2}, kF64));
  CHECK(loss.item() == 1.0);
  loss.backward();
  for (double g : zero.grad().to_vector<double>()) CHECK(std::isfinite(g));

  CHECK_THROWS_AS(cosine_embedding_loss(ones({2, 3}), ones({2, 3}), ones({2, 1})), ShapeError);
  CHECK_THROWS_AS(cosine_embedding_loss(ones({2, 3}), ones({2, 3}), ones({3})), ShapeError);
  CHECK_THROWS_AS(cosine_embedding_loss(ones({3}), ones({3}), ones({3})), ShapeError);
  CHECK_THROWS_AS(cosine_embedding_loss(ones({2, 3}), ones({2, 4}), ones({2})), ShapeError);
}

}  // namespace
}  // namespace loom
