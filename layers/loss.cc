// File: layers/loss.cc
// Loss objects forward to the functional losses with their stored options.
#include "layers/loss.h"

#include "core/error.h"

namespace loom::nn {

CrossEntropyLoss::CrossEntropyLoss(CrossEntropyOptions options) : options_(options) {
  LOOM_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, ValueError,
             "[CrossEntropyLoss] label_smoothing must be in [0, 1], got {}",
             options.label_smoothing);
}

Tensor CrossEntropyLoss::operator()(const Tensor& input, const Tensor& target) const {
  return cross_entropy(input, target, options_);
}

Tensor NLLLoss::operator()(const Tensor& input, const Tensor& target) const {
  return nll_loss(input, target, options_);
}

Tensor MSELoss::operator()(const Tensor& input, const Tensor& target) const {
  return mse_loss(input, target, reduction_);
}

Tensor L1Loss::operator()(const Tensor& input, const Tensor& target) const {
  return l1_loss(input, target, reduction_);
}

SmoothL1Loss::SmoothL1Loss(Reduction reduction, double beta) : reduction_(reduction), beta_(beta) {
  LOOM_CHECK(beta >= 0, ValueError, "[SmoothL1Loss] beta must be >= 0, got {}", beta);
}

Tensor SmoothL1Loss::operator()(const Tensor& input, const Tensor& target) const {
  return smooth_l1_loss(input, target, reduction_, beta_);
}

HuberLoss::HuberLoss(Reduction reduction, double delta) : reduction_(reduction), delta_(delta) {
  LOOM_CHECK(delta > 0, ValueError, "[HuberLoss] delta must be > 0, got {}", delta);
}

Tensor HuberLoss::operator()(const Tensor& input, const Tensor& target) const {
  return huber_loss(input, target, reduction_, delta_);
}

Tensor BCEWithLogitsLoss::operator()(const Tensor& input, const Tensor& target) const {
  return binary_cross_entropy_with_logits(input, target, options_);
}

Tensor BCELoss::operator()(const Tensor& input, const Tensor& target) const {
  return binary_cross_entropy(input, target, options_);
}

Tensor KLDivLoss::operator()(const Tensor& input, const Tensor& target) const {
  return kl_div(input, target, options_);
}

TripletMarginLoss::TripletMarginLoss(TripletMarginOptions options) : options_(options) {
  LOOM_CHECK(options_.margin > 0, ValueError, "[TripletMarginLoss] margin must be > 0, got {}", options_.margin);
}

Tensor TripletMarginLoss::operator()(const Tensor& anchor, const Tensor& positive, const Tensor& negative) const {
  return triplet_margin_loss(anchor, positive, negative, options_);
}

Tensor CosineEmbeddingLoss::operator()(const Tensor& x1, const Tensor& x2, const Tensor& target) const {
  return cosine_embedding_loss(x1, x2, target, options_);
}

}  // namespace loom::nn
