// File: core/ops/loss.h
// Losses, as torch.nn.functional: cross_entropy (fused log-softmax + NLL, from
// logits), nll_loss (from log-probabilities) and mse_loss.
//
// N batch, C classes, d1... optional spatial dims (e.g. H, W for segmentation).
//   auto loss = loom::cross_entropy(logits, labels);  // logits (N, C), labels (N) int64
//   auto per_pixel = loom::cross_entropy(scores, masks, {.reduction = loom::Reduction::None,
//                                                        .ignore_index = 255});
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace loom {

// None keeps one loss per position; Mean averages over positions whose target is
// not ignore_index (NaN when every target is ignored, as PyTorch); Sum adds them.
enum class Reduction { None, Mean, Sum };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;  // positions with this target add 0 loss and get 0 grad
  // eps in [0, 1]: the target distribution becomes (1 - eps) * one-hot + eps / C, so
  // loss = (1 - eps) * -log p[target] + eps * mean_c(-log p[c]).
  double label_smoothing = 0.0;
};

// logits (N, C, d1...) float, target (N, d1...) int64 class indices in [0, C).
// Returns (N, d1...) for Reduction::None, else a 0-D tensor.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});

struct NllLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
};

// loss = -log_probs[n, target, d1...]; log_probs (N, C, d1...), e.g. from log_softmax
// over dim 1, and target (N, d1...) int64 as for cross_entropy.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, NllLossOptions options = {});

// (input - target)^2, reduced; input and target have one shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace loom
