// File: core/kernel/norm.h
// The running statistics a training batch norm blends, shared by the CPU and
// CUDA batch-norm kernels.
#pragma once

#include "core/strided.h"

namespace loom::kernel {

// Running statistics (C) that a training forward blends in place, as PyTorch:
//   running = (1 - momentum) * running + momentum * batch statistic,
// with the unbiased batch variance (biased * M / (M - 1)).
struct RunningStats {
  Strided mean;
  Strided var;
  double momentum = 0.1;
};

}  // namespace loom::kernel
