// File: core/cuda/philox.h
// Where a GPU random fill's Philox counters start: the plain struct that
// random.h's host side and the launchers (random_kernels.h) share, with no
// CUDA types, so core/ops includes it in every build.
#pragma once

#include <cstdint>

namespace loom::cuda {

// Where a fill's Philox counters start. Eagerly: block first_block under seed.
// Inside a captured CUDA graph: base points at the (seed, offset) pair the
// graph's replay stores on the device before each launch, and the fill starts
// at block offset + first_block, so every replay draws fresh numbers.
struct PhiloxArgs {
  uint64_t seed = 0;
  uint64_t first_block = 0;
  const uint64_t* base = nullptr;  // device memory: {seed, offset}; null when eager
};

}  // namespace loom::cuda
