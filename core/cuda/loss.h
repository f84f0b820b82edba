// File: core/cuda/loss.h
// Cross-entropy and NLL on the GPU: the same functions as core/cpu/loss.h, with
// the same arguments (device views), so an op can call cpu:: or cuda:: alike.
//
// N batch, C classes, d1... optional spatial dims; a "position" is one (n, d1...).
// Scores are (N, C, d1...) float32 or float64, targets (N, d1...) int64, any
// strides, at most 8 dims. The op checks the targets first; the kernels still
// never index with an out-of-range one (see each function).
//
// The forwards return the totals to the host, so they wait for the stream (and
// cannot be captured into a CUDA graph); the backwards only queue work.
#pragma once

#include <cstdint>

#include "core/cpu/loss.h"  // CrossEntropyParams, LossTotal
#include "core/strided.h"

namespace loom::cuda {

// losses (N, d1...): (1 - eps) * -log p[target] + eps * mean_c(-log p[c]), with
// p = softmax(logits) over C; 0 at ignored positions. Throws IndexError naming
// the class index and position if a target is outside [0, C) and not ignore_index.
cpu::LossTotal cross_entropy_forward(const Strided& losses, const Strided& logits,
                                     const Strided& target, const cpu::CrossEntropyParams& params);
// dlogits (N, C, d1...) = (softmax(logits) - smoothed one-hot) * dloss * scale;
// 0 at ignored positions, NaN rows where a target is out of range.
void cross_entropy_backward(const Strided& dlogits, const Strided& logits, const Strided& target,
                            const Strided& dloss, double scale,
                            const cpu::CrossEntropyParams& params);

// losses (N, d1...) = -log_probs[n, target, d1...]; 0 at ignored positions.
// Throws IndexError for an out-of-range target, as cross_entropy_forward.
cpu::LossTotal nll_loss_forward(const Strided& losses, const Strided& log_probs,
                                const Strided& target, int64_t ignore_index);
// dlog_probs (N, C, d1...) = -dloss * scale at each target class, 0 elsewhere;
// NaN rows where a target is out of range.
void nll_loss_backward(const Strided& dlog_probs, const Strided& target, const Strided& dloss,
                       double scale, int64_t ignore_index);

}  // namespace loom::cuda
