// File: core/cuda/scratch.h
// The scratch a Loom kernel asks its caller for (the weight gradients' partial sums): how many elements of
// which dtype. core/ops allocates it from the tensor allocator on the kernel's first run only, so a shape
// where cuDNN wins the race allocates nothing, and a captured step takes it from the step's pool.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "core/strided.h"

namespace loom::cuda {

struct Scratch {
  int64_t elements = 0;
  DType dtype = DType::Float32;
};

// Throws ValueError naming `op` unless `scratch` holds at least need.elements of need.dtype.
void check_scratch(std::string_view op, const Strided& scratch, const Scratch& need);

}  // namespace loom::cuda
