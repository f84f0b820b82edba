// File: core/ops/loss.h
// Losses, as torch.nn.functional: cross_entropy (fused log-softmax + NLL, from
// logits), nll_loss (from log-probabilities), the regression losses (mse_loss,
// l1_loss, smooth_l1_loss, huber_loss), binary_cross_entropy_with_logits,
// binary_cross_entropy (from probabilities), kl_div, and the embedding losses
// triplet_margin_loss and cosine_embedding_loss.
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
// BatchMean (kl_div's alone, as PyTorch's "batchmean") divides the sum by the
// batch size input.size(0); the other losses refuse it.
enum class Reduction { None, Mean, Sum, BatchMean };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;  // positions with this target add 0 loss and get 0 grad
  // eps in [0, 1]: the target distribution becomes (1 - eps) * one-hot + eps / C, so
  // loss = (1 - eps) * -log p[target] + eps * mean_c(-log p[c]).
  double label_smoothing = 0.0;
};

// logits (N, C, d1...) float, and target either
// - (N, d1...) int64 class indices in [0, C), or
// - class probabilities of the logits' shape, any floating dtype (mixup,
//   distillation; PyTorch's rule): loss = -sum_c target'[c] log_softmax(logits)[c]
//   with target' the smoothed target above; Mean averages over the N * d1 * ...
//   positions, ignore_index must stay negative, and the target gets a gradient
//   where it requires one.
// Returns (N, d1...) for Reduction::None, else a 0-D tensor. One sample's logits
// (C) take a 0-D class index or (C) probabilities; None's loss is then 0-D.
//   auto loss = loom::cross_entropy(logits, lambda * one_hot(a, C) + (1 - lambda) * one_hot(b, C));  // mixup
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});

struct NllLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
};

// loss = -log_probs[n, target, d1...]; log_probs (N, C, d1...), e.g. from log_softmax
// over dim 1, and target (N, d1...) int64 as for cross_entropy; one sample's
// log_probs (C) take a 0-D target.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, NllLossOptions options = {});

// The elementwise losses below take input and target of one shape, dtype and
// device (PyTorch's broadcasting here is usually a bug, so expand the target
// explicitly if it is meant), except that bf16 / fp16 operands are computed
// in fp32, as torch.autocast does: the loss of bf16 predictions is fp32.
// The regression losses of d = input - target, reduced:
// d^2
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// |d|; the gradient at d = 0 is 0, as PyTorch's.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta; beta >= 0, and 0 gives l1_loss.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); delta > 0 (delta * smooth_l1 with beta = delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);

struct BceWithLogitsOptions {
  Reduction reduction = Reduction::Mean;
  Tensor weight;      // optional: each element's loss times weight (broadcast to input)
  Tensor pos_weight;  // optional: the positive term's weight, broadcast to input, e.g. (C) for (N, C) logits
};

// Binary cross-entropy of sigmoid(input) against target probabilities in [0, 1],
// computed from the logits without forming the sigmoid (stable for any logit):
//   loss = (1 - target) input + (1 + (pos_weight - 1) target) softplus(-input)
// input and target have one shape (N, *), dtype and device; the gradient
// w.r.t. input is sigmoid(input) - target without pos_weight.
//   auto loss = loom::binary_cross_entropy_with_logits(mask_logits, masks);  // (N, 1, H, W) each
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BceWithLogitsOptions& options = {});

struct BceOptions {
  Reduction reduction = Reduction::Mean;
  Tensor weight;  // optional: each element's loss times weight (broadcast to input)
};

// Binary cross-entropy of probabilities `input` in [0, 1] (e.g. a sigmoid's output)
// against target probabilities, as torch.nn.functional.binary_cross_entropy:
//   loss = -weight (target log(input) + (1 - target) log(1 - input))
// with each log clamped at -100, so an input of exactly 0 or 1 (a saturated
// fp32 sigmoid) gives a finite loss and a finite gradient. The gradient is
// (input - target) / (input (1 - input)) inside (0, 1); where a clamped log is
// selected it is the other term's alone. An input outside [0, 1] (or NaN) is a
// ValueError, checked on the values (a GPU input is read back, except while a
// CUDA graph is captured: its loss is then NaN). binary_cross_entropy_with_logits
// on the logits is the stable form; this one is for models that end in a sigmoid.
//   auto loss = loom::binary_cross_entropy(sigmoid(decoder(z)), images);  // autoencoder, (N, 1, H, W)
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BceOptions& options = {});

struct KlDivOptions {
  // BatchMean is the KL divergence per sample (the sum over input.size(0));
  // Mean divides by every element, as PyTorch's default "mean".
  Reduction reduction = Reduction::Mean;
  bool log_target = false;  // the target holds log-probabilities
};

// The Kullback-Leibler divergence KL(target || q) pointwise, as
// torch.nn.functional.kl_div: input holds log q (e.g. log_softmax), target p:
//   loss = p (log p - input), 0 where p = 0; with log_target, exp(target) (target - input).
// input and target have one shape, dtype and device (16-bit ones compute in fp32).
//   auto loss = loom::kl_div(log_softmax(student / T, 1), softmax(teacher / T, 1),
//                            {.reduction = loom::Reduction::BatchMean}) * (T * T);  // distillation
Tensor kl_div(const Tensor& input, const Tensor& target, const KlDivOptions& options = {});

struct TripletMarginOptions {
  double margin = 1.0;
  double p = 2.0;     // the distance's norm (vector_norm's ord)
  double eps = 1e-6;  // pairwise_distance's
  bool swap = false;  // the negative's distance is the smaller of d(anchor, n) and d(positive, n)
  Reduction reduction = Reduction::Mean;
};

// max(d(anchor, positive) - d(anchor, negative) + margin, 0) per sample, with
// d = pairwise_distance(., ., p, eps) along the last dim, as
// F.triplet_margin_loss: anchor, positive and negative of one rank (they
// broadcast), (N, D) or one (D) sample. The gradient at the hinge is that of
// its linear side, as PyTorch's clamp_min.
//   auto loss = loom::triplet_margin_loss(embed(a), embed(p), embed(n), {.margin = 0.2});
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginOptions& options = {});

struct CosineEmbeddingOptions {
  double margin = 0.0;  // in [-1, 1]; 0 to 0.5 is usual
  Reduction reduction = Reduction::Mean;
};

// Per pair, with c the cosine of x1 and x2 along their last dim: 1 - c where
// target is 1, max(c - margin, 0) where it is -1 (0 for any other target), as
// F.cosine_embedding_loss, whose c divides by sqrt((|x1|^2 + 1e-12)(|x2|^2 +
// 1e-12)). x1 and x2 (N, D) with target (N), or (D) with a 0-D target; the
// target's dtype may be integer or floating.
//   auto loss = loom::cosine_embedding_loss(a, b, same_class * 2 - 1, {.margin = 0.1});
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                             const CosineEmbeddingOptions& options = {});

}  // namespace loom
