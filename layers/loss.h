// File: layers/loss.h
// Losses as callable objects, as torch.nn's CrossEntropyLoss, NLLLoss, MSELoss,
// L1Loss, SmoothL1Loss, HuberLoss, BCEWithLogitsLoss, BCELoss, KLDivLoss, TripletMarginLoss and
// CosineEmbeddingLoss; the options are the
// functional ones (core/ops/loss.h), checked when the object is made.
//
// N batch, C classes.
//   nn::CrossEntropyLoss criterion({.label_smoothing = 0.1});
//   Tensor loss = criterion(net(x), labels);  // logits (N, C), labels (N) int64 -> 0-d
#pragma once

#include <utility>

#include "core/ops/loss.h"
#include "core/tensor.h"

namespace loom::nn {

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {});  // checks label_smoothing
  // logits (N, C, d1...), target (N, d1...) int64 class indices or class
  // probabilities of the logits' shape (loom::cross_entropy).
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  const CrossEntropyOptions& options() const { return options_; }

 private:
  CrossEntropyOptions options_;
};

class NLLLoss {
 public:
  explicit NLLLoss(NllLossOptions options = {}) : options_(options) {}
  // log_probs (N, C, d1...), target (N, d1...) int64 class indices.
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  const NllLossOptions& options() const { return options_; }

 private:
  NllLossOptions options_;
};

class MSELoss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  // input and target of one shape.
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

class L1Loss {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  // input and target of one shape.
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

class SmoothL1Loss {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::Mean, double beta = 1.0);  // beta >= 0
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  Reduction reduction() const { return reduction_; }
  double beta() const { return beta_; }

 private:
  Reduction reduction_;
  double beta_;
};

class HuberLoss {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::Mean, double delta = 1.0);  // delta > 0
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  Reduction reduction() const { return reduction_; }
  double delta() const { return delta_; }

 private:
  Reduction reduction_;
  double delta_;
};

//   nn::BCEWithLogitsLoss criterion({.pos_weight = loom::full({1}, 3.0)});  // positives count 3x
class BCEWithLogitsLoss {
 public:
  explicit BCEWithLogitsLoss(BceWithLogitsOptions options = {}) : options_(std::move(options)) {}
  // logits and target probabilities of one shape.
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  const BceWithLogitsOptions& options() const { return options_; }

 private:
  BceWithLogitsOptions options_;
};

//   nn::BCELoss criterion;  criterion(sigmoid(logits), target);  // a model that ends in a sigmoid
class BCELoss {
 public:
  explicit BCELoss(BceOptions options = {}) : options_(std::move(options)) {}
  // probabilities in [0, 1] and target probabilities of one shape.
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  const BceOptions& options() const { return options_; }

 private:
  BceOptions options_;
};

//   nn::KLDivLoss criterion({.reduction = Reduction::BatchMean});  criterion(log_softmax(x, 1), p);
class KLDivLoss {
 public:
  explicit KLDivLoss(KlDivOptions options = {}) : options_(options) {}
  // log-probabilities and target probabilities (log-probabilities with log_target) of one shape.
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  const KlDivOptions& options() const { return options_; }

 private:
  KlDivOptions options_;
};

//   nn::TripletMarginLoss criterion({.margin = 0.2});  criterion(embed(a), embed(p), embed(n));
class TripletMarginLoss {
 public:
  explicit TripletMarginLoss(TripletMarginOptions options = {});  // checks margin > 0, as PyTorch's
  // anchor, positive and negative embeddings (N, D) or one (D) sample each.
  Tensor operator()(const Tensor& anchor, const Tensor& positive, const Tensor& negative) const;
  const TripletMarginOptions& options() const { return options_; }

 private:
  TripletMarginOptions options_;
};

//   nn::CosineEmbeddingLoss criterion({.margin = 0.1});  criterion(a, b, target);  // target +-1
class CosineEmbeddingLoss {
 public:
  explicit CosineEmbeddingLoss(CosineEmbeddingOptions options = {}) : options_(options) {}
  // x1 and x2 (N, D) with target (N) of 1 (similar) and -1 (dissimilar), or (D) with a 0-D target.
  Tensor operator()(const Tensor& x1, const Tensor& x2, const Tensor& target) const;
  const CosineEmbeddingOptions& options() const { return options_; }

 private:
  CosineEmbeddingOptions options_;
};

}  // namespace loom::nn
