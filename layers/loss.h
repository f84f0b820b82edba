// File: layers/loss.h
// Losses as callable objects, as torch.nn's CrossEntropyLoss, NLLLoss and
// MSELoss; the options are the functional ones (core/ops/loss.h).
//
// N batch, C classes.
//   nn::CrossEntropyLoss criterion({.label_smoothing = 0.1});
//   Tensor loss = criterion(net(x), labels);  // logits (N, C), labels (N) int64 -> 0-d
#pragma once

#include "core/ops/loss.h"
#include "core/tensor.h"

namespace loom::nn {

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {});  // checks label_smoothing
  // logits (N, C, d1...), target (N, d1...) int64 class indices.
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

}  // namespace loom::nn
