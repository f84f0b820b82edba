// File: core/kernel/loss.h
// The parameters of the classification losses and the total a sum or mean
// reduction needs, shared by the CPU and CUDA loss kernels.
#pragma once

#include <cstdint>

namespace loom::kernel {

struct CrossEntropyParams {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // eps in [0, 1]
};

// What a sum or mean reduction needs, accumulated in double by the forward pass.
struct LossTotal {
  double sum = 0.0;   // of the per-position losses
  int64_t count = 0;  // positions whose target is not ignore_index
};

}  // namespace loom::kernel
