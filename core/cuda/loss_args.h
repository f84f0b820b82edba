// File: core/cuda/loss_args.h
// What a loss forward leaves in device memory and what scales its backward:
// plain structs shared by the launchers (loss_kernels.h) and the host side
// (loss.h), with no CUDA types, so core/ops includes them in every build.
#pragma once

#include <cstdint>

namespace loom::cuda {

constexpr unsigned long long kNoBadPosition = ~0ull;

// What a forward launch leaves in device memory for the backward (and for the
// host, when it asks).
struct LossTotals {
  double sum;     // of the per-position losses
  int64_t count;  // positions whose target is not ignore_index
  // The smallest row-major position whose target is out of range, or kNoBadPosition.
  unsigned long long first_bad_position;
};

// Where a forward's results go besides the per-position losses.
struct LossOutputs {
  LossTotals* totals;  // device memory, read later by the backward
  // A 0-d tensor for the reduced loss: the sum, or the mean when `mean`; null
  // for reduction None. Its dtype is the losses'.
  void* reduced;
  bool mean;
};

// What scales dloss in a backward: 1, or 1 / totals->count for a mean.
struct LossScale {
  const LossTotals* totals;  // the forward's
  bool mean;
};

}  // namespace loom::cuda
