// File: core/cuda/loss_kernels.h
// Launchers for the fused cross-entropy and NLL kernels in loss.cu. They return
// the launch status; loss.cc checks it and turns the device totals into
// cpu::LossTotal.
//
// N batch, C classes, d1... optional spatial dims; a "position" is one (n, d1...).
// Scores are (N, C, d1...) float32 or float64 and targets (N, d1...) int64, any
// strides, at most kMaxDims dims. A target outside [0, C) that is not
// ignore_index is never used as an index: the forward flags it (and writes a
// NaN loss), the backward writes a NaN row for it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cpu/loss.h"  // CrossEntropyParams, shared with the CPU reference
#include "core/strided.h"

namespace loom::cuda {

// The forward pass writes one of these per block; a second kernel adds them up
// in a fixed order, so the totals do not change from run to run.
struct LossPartial {
  double sum;
  int64_t count;
};

constexpr unsigned long long kNoBadPosition = ~0ull;

// What a forward launch leaves in device memory for the host.
struct LossTotals {
  double sum;     // of the per-position losses
  int64_t count;  // positions whose target is not ignore_index
  // The smallest row-major position whose target is out of range, or kNoBadPosition.
  unsigned long long first_bad_position;
};

constexpr int kMaxLossBlocks = 1024;

// Device scratch for one forward launch (the host keeps one per thread).
struct LossScratch {
  LossTotals totals;
  LossPartial partials[kMaxLossBlocks];
};

// losses (N, d1...) and scratch->totals, as cpu::cross_entropy_forward.
cudaError_t launch_cross_entropy_forward(const Strided& losses, const Strided& logits,
                                         const Strided& target,
                                         const cpu::CrossEntropyParams& params,
                                         LossScratch* scratch, cudaStream_t stream);
// dlogits (N, C, d1...), as cpu::cross_entropy_backward.
cudaError_t launch_cross_entropy_backward(const Strided& dlogits, const Strided& logits,
                                          const Strided& target, const Strided& dloss, double scale,
                                          const cpu::CrossEntropyParams& params,
                                          cudaStream_t stream);

// losses (N, d1...) and scratch->totals, as cpu::nll_loss_forward.
cudaError_t launch_nll_loss_forward(const Strided& losses, const Strided& log_probs,
                                    const Strided& target, int64_t ignore_index,
                                    LossScratch* scratch, cudaStream_t stream);
// dlog_probs (N, C, d1...), as cpu::nll_loss_backward.
cudaError_t launch_nll_loss_backward(const Strided& dlog_probs, const Strided& target,
                                     const Strided& dloss, double scale, int64_t ignore_index,
                                     cudaStream_t stream);

}  // namespace loom::cuda
