// File: tests/layers/loss_test.cc
// Loss objects equal their functional ops with the same options; a hand-checked
// value each; argument errors, checked when the object is made.
// N batch, C classes.
#include "layers/loss.h"

#include <doctest/doctest.h>

#include <cmath>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

Tensor labels(const std::vector<double>& values) {
  return tensor(values, {static_cast<int64_t>(values.size())}, {.dtype = DType::Int64});
}

TEST_CASE("CrossEntropyLoss equals cross_entropy with its options") {
  Generator gen(1);
  const Tensor logits = randn({4, 5}, {}, &gen);
  const Tensor target = labels({0, 4, 2, 1});
  CHECK_CLOSE(nn::CrossEntropyLoss()(logits, target), cross_entropy(logits, target), 0, 0);
  const CrossEntropyOptions smooth{.label_smoothing = 0.1};
  CHECK_CLOSE(nn::CrossEntropyLoss(smooth)(logits, target), cross_entropy(logits, target, smooth),
              0, 0);
  const CrossEntropyOptions per_sample{.reduction = Reduction::None, .ignore_index = 2};
  const Tensor losses = nn::CrossEntropyLoss(per_sample)(logits, target);
  CHECK_CLOSE(losses, cross_entropy(logits, target, per_sample), 0, 0);
  CHECK(losses.at({2}) == 0.0);
  // Two equal logits: -log(1/2).
  CHECK(nn::CrossEntropyLoss()(zeros({1, 2}), labels({1})).item() ==
        doctest::Approx(std::log(2.0)));
  // Smoothing 0.5 over 2 classes with logits (0, log 3): 0.5 * -log(3/4) + 0.5 * mean(-log p).
  const Tensor l = tensor({0, std::log(3.0)}, {1, 2});
  const double expected = 0.5 * -std::log(0.75) + 0.5 * 0.5 * (-std::log(0.25) - std::log(0.75));
  CHECK(nn::CrossEntropyLoss({.label_smoothing = 0.5})(l, labels({1})).item() ==
        doctest::Approx(expected));
}

TEST_CASE("NLLLoss and MSELoss equal their ops") {
  Generator gen(2);
  const Tensor log_probs = log_softmax(randn({3, 4}, {}, &gen), 1);
  const Tensor target = labels({3, 0, 1});
  CHECK_CLOSE(nn::NLLLoss()(log_probs, target), nll_loss(log_probs, target), 0, 0);
  CHECK_CLOSE(nn::NLLLoss({.reduction = Reduction::Sum})(log_probs, target),
              nll_loss(log_probs, target, {.reduction = Reduction::Sum}), 0, 0);
  CHECK(nn::NLLLoss()(tensor({-1, -2, -3, -4}, {2, 2}), labels({0, 1})).item() == 2.5);
  const Tensor a = randn({2, 3}, {}, &gen), b = randn({2, 3}, {}, &gen);
  CHECK_CLOSE(nn::MSELoss()(a, b), mse_loss(a, b), 0, 0);
  CHECK_CLOSE(nn::MSELoss(Reduction::None)(a, b), mse_loss(a, b, Reduction::None), 0, 0);
  CHECK(nn::MSELoss()(tensor({1, 2}, {2}), tensor({3, 2}, {2})).item() == 2.0);
}

TEST_CASE("loss errors") {
  CHECK_THROWS_WITH_FRAGMENT(nn::CrossEntropyLoss({.label_smoothing = 1.5}), ValueError,
                             "[CrossEntropyLoss] label_smoothing must be in [0, 1], got 1.5");
  CHECK_THROWS_WITH_FRAGMENT(nn::CrossEntropyLoss()(zeros({2, 3}), labels({0, 1, 2})), ShapeError,
                             "[cross_entropy] target has shape (3,)");
  CHECK_THROWS_WITH_FRAGMENT(nn::MSELoss()(zeros({2}), zeros({3})), ShapeError,
                             "[mse_loss] input has shape (2,) but target has shape (3,)");
}

TEST_CASE("L1Loss, SmoothL1Loss, HuberLoss, BCEWithLogitsLoss, BCELoss and KLDivLoss equal their ops") {
  Generator gen(55);
  const Tensor a = randn({6, 2}, kF64, &gen), b = randn({6, 2}, kF64, &gen);
  CHECK_CLOSE(nn::L1Loss(Reduction::Sum)(a, b), l1_loss(a, b, Reduction::Sum), 0, 0);
  CHECK_CLOSE(nn::SmoothL1Loss(Reduction::None, 0.4)(a, b), smooth_l1_loss(a, b, Reduction::None, 0.4), 0, 0);
  CHECK_CLOSE(nn::HuberLoss(Reduction::Mean, 2.0)(a, b), huber_loss(a, b, Reduction::Mean, 2.0), 0, 0);
  const Tensor pos_weight = full({2}, 3.0, kF64), t = rand({6, 2}, kF64, &gen);
  const nn::BCEWithLogitsLoss criterion({.pos_weight = pos_weight});
  CHECK_CLOSE(criterion(a, t), binary_cross_entropy_with_logits(a, t, {.pos_weight = pos_weight}), 0, 0);
  CHECK(criterion.options().pos_weight.is_same(pos_weight));
  const Tensor weight = rand({6, 1}, kF64, &gen);
  const nn::BCELoss bce({.reduction = Reduction::Sum, .weight = weight});
  CHECK_CLOSE(bce(sigmoid(a), t), binary_cross_entropy(sigmoid(a), t, {.reduction = Reduction::Sum, .weight = weight}),
              0, 0);
  CHECK(bce.options().weight.is_same(weight));
  const nn::KLDivLoss kl({.reduction = Reduction::BatchMean, .log_target = true});
  CHECK_CLOSE(kl(log_softmax(a, 1), log_softmax(b, 1)),
              kl_div(log_softmax(a, 1), log_softmax(b, 1), {.reduction = Reduction::BatchMean, .log_target = true}),
              0, 0);
  CHECK(kl.options().log_target);
  CHECK_THROWS_WITH_FRAGMENT(nn::SmoothL1Loss(Reduction::Mean, -1.0), ValueError,
                             "[SmoothL1Loss] beta must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(nn::HuberLoss(Reduction::Mean, 0.0), ValueError, "[HuberLoss] delta must be > 0, got 0");
}

TEST_CASE("TripletMarginLoss and CosineEmbeddingLoss equal their ops; the triplet margin must be > 0") {
  Generator gen(56);
  const Tensor a = randn({5, 3}, kF64, &gen), p = randn({5, 3}, kF64, &gen), n = randn({5, 3}, kF64, &gen);
  const TripletMarginOptions options{.margin = 0.5, .p = 1.0, .swap = true, .reduction = Reduction::None};
  const nn::TripletMarginLoss triplet(options);
  CHECK_CLOSE(triplet(a, p, n), triplet_margin_loss(a, p, n, options), 0, 0);
  CHECK(triplet.options().swap);
  const Tensor target = tensor({1, -1, -1, 1, 1}, {5}, {.dtype = DType::Int64});
  const nn::CosineEmbeddingLoss cosine({.margin = 0.25, .reduction = Reduction::Sum});
  CHECK_CLOSE(cosine(a, p, target),
              cosine_embedding_loss(a, p, target, {.margin = 0.25, .reduction = Reduction::Sum}), 0, 0);
  CHECK_THROWS_WITH_FRAGMENT(nn::TripletMarginLoss({.margin = 0.0}), ValueError,
                             "[TripletMarginLoss] margin must be > 0, got 0");
}

}  // namespace
}  // namespace loom
