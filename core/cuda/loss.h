// File: core/cuda/loss.h
// Cross-entropy and NLL on the GPU: the same functions as core/cpu/loss.h, but
// nothing comes back to the host. The forward leaves its totals in device
// memory (LossOutputs: the op allocates them), writes the reduced loss there
// too, and the backward reads the mean's count from them: the whole loss can
// be captured into a CUDA graph.
//
// N batch, C classes, d1... optional spatial dims; a "position" is one (n, d1...).
// Scores are (N, C, d1...) float32 or float64, targets (N, d1...) int64, any
// strides, at most 8 dims. The kernels never index with an out-of-range
// target: they flag the first such position in the totals and write NaN losses
// and gradients; the op reads the totals back after the forward (read_totals)
// wherever it can wait for them, outside a CUDA-graph capture.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cuda/loss_args.h"
#include "core/kernel/loss.h"
#include "core/strided.h"

namespace loom::cuda {

// losses (N, d1...): (1 - eps) * -log p[target] + eps * mean_c(-log p[c]), with
// p = softmax(logits) over C; 0 at ignored positions. Also fills `out`.
void cross_entropy_forward(const Strided& losses, const Strided& logits, const Strided& target,
                           const kernel::CrossEntropyParams& params, const LossOutputs& out);
// dlogits (N, C, d1...) = (softmax(logits) - smoothed one-hot) * dloss * scale;
// 0 at ignored positions, NaN rows where a target is out of range.
void cross_entropy_backward(const Strided& dlogits, const Strided& logits, const Strided& target,
                            const Strided& dloss, const LossScale& scale,
                            const kernel::CrossEntropyParams& params);

// losses (N, d1...) = -log_probs[n, target, d1...]; 0 at ignored positions.
void nll_loss_forward(const Strided& losses, const Strided& log_probs, const Strided& target,
                      int64_t ignore_index, const LossOutputs& out);
// dlog_probs (N, C, d1...) = -dloss * scale at each target class, 0 elsewhere;
// NaN rows where a target is out of range.
void nll_loss_backward(const Strided& dlog_probs, const Strided& target, const Strided& dloss,
                       const LossScale& scale, int64_t ignore_index);

// Waits for the forward that wrote `totals` and returns them; an out-of-range
// target it flagged becomes an IndexError naming the class index and position.
kernel::LossTotal read_totals(const LossTotals* totals, const Strided& target, int64_t classes,
                              int64_t ignore_index, std::string_view op);

}  // namespace loom::cuda
