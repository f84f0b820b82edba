// File: core/cpu/loss.h
// Fused classification losses over class indices: cross-entropy straight from
// logits (log-softmax, smoothing and NLL in one pass per position) and NLL from
// log-probabilities, with their backward passes.
//
// N batch, C classes, d1... optional spatial dims; a "position" is one (n, d1...).
// Scores are (N, C, d1...) and targets (N, d1...) int64, any strides. Kernels
// assume every target is in [0, C) or equal to ignore_index (the op checks).
#pragma once

#include <cstdint>

#include "core/kernel/loss.h"
#include "core/strided.h"

namespace loom::cpu {

// losses (N, d1...): (1 - eps) * -log p[target] + eps * mean_c(-log p[c]), where
// p = softmax(logits) over C; 0 at ignored positions.
kernel::LossTotal cross_entropy_forward(const Strided& losses, const Strided& logits, const Strided& target,
                                const kernel::CrossEntropyParams& params);
// dlogits (N, C, d1...) = (softmax(logits) - smoothed one-hot) * dloss * scale,
// with smoothed one-hot = (1 - eps) * onehot(target) + eps / C; 0 at ignored
// positions. dloss has the target's sizes (a stride-0 view for a reduced loss).
void cross_entropy_backward(const Strided& dlogits, const Strided& logits, const Strided& target,
                            const Strided& dloss, double scale, const kernel::CrossEntropyParams& params);

// losses (N, d1...) = -log_probs[n, target, d1...]; 0 at ignored positions.
kernel::LossTotal nll_loss_forward(const Strided& losses, const Strided& log_probs, const Strided& target,
                           int64_t ignore_index);
// dlog_probs (N, C, d1...) = -dloss * scale at each target class, 0 elsewhere.
void nll_loss_backward(const Strided& dlog_probs, const Strided& target, const Strided& dloss,
                       double scale, int64_t ignore_index);

}  // namespace loom::cpu
