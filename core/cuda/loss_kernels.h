// File: core/cuda/loss_kernels.h
// Launchers for the fused cross-entropy and NLL kernels in loss.cu. They return
// the launch status; loss.cc checks it. Nothing is read back to the host: the
// forward leaves its totals (and the reduced loss) in device memory, where the
// backward reads its scale, so a whole training step can be captured.
//
// N batch, C classes, d1... optional spatial dims; a "position" is one (n, d1...).
// Scores are (N, C, d1...) and targets (N, d1...) int64, any strides, at most
// kMaxDims dims. Losses and dloss are float32 or float64; scores (and dscores)
// are that dtype too, or bfloat16 / float16 under float32 losses: read into
// float32 and the gradient rounded once on store, the same bits as converting
// the scores to float32 first and the float32 gradient back after. A target outside [0, C) that is not
// ignore_index is never used as an index: the forward flags it (and writes a
// NaN loss), the backward writes a NaN row for it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/loss_args.h"
#include "core/kernel/loss.h"
#include "core/strided.h"

namespace loom::cuda {

// The forward pass writes one of these per block; a second kernel adds them up
// in a fixed order, so the totals do not change from run to run.
struct LossPartial {
  double sum;
  int64_t count;
};

constexpr int kMaxLossBlocks = 1024;

// Device scratch for the block totals of one forward launch at a time (the
// host keeps one per thread; launches on one stream run one after another).
struct LossScratch {
  LossPartial partials[kMaxLossBlocks];
};

// losses (N, d1...), as cpu::cross_entropy_forward, and `out`.
cudaError_t launch_cross_entropy_forward(const Strided& losses, const Strided& logits,
                                         const Strided& target,
                                         const kernel::CrossEntropyParams& params,
                                         const LossOutputs& out, LossScratch* scratch,
                                         cudaStream_t stream);
// dlogits (N, C, d1...), as cpu::cross_entropy_backward.
cudaError_t launch_cross_entropy_backward(const Strided& dlogits, const Strided& logits,
                                          const Strided& target, const Strided& dloss,
                                          const LossScale& scale,
                                          const kernel::CrossEntropyParams& params,
                                          cudaStream_t stream);

// losses (N, d1...), as cpu::nll_loss_forward, and `out`.
cudaError_t launch_nll_loss_forward(const Strided& losses, const Strided& log_probs,
                                    const Strided& target, int64_t ignore_index,
                                    const LossOutputs& out, LossScratch* scratch,
                                    cudaStream_t stream);
// dlog_probs (N, C, d1...), as cpu::nll_loss_backward.
cudaError_t launch_nll_loss_backward(const Strided& dlog_probs, const Strided& target,
                                     const Strided& dloss, const LossScale& scale,
                                     int64_t ignore_index, cudaStream_t stream);

}  // namespace loom::cuda
