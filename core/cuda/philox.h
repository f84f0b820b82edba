// File: core/cuda/philox.h
// Where a GPU random fill's Philox counters start and what it computes from
// them: the plain structs that random.h's host side and the launchers
// (random_kernels.h) share, with no CUDA types, so core/ops includes them in
// every build.
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

// What element i of a fill is, from Philox block i: core/factory.cc's CPU
// draws in the same arithmetic (one rounding per operation, no fused
// multiply-add), so a generator state gives the same bits on either device.
struct RandomDraw {
  enum class Kind {
    Uniform,  // low + unit * span, unit in [0, 1) from `bits` random bits (uniform_unit, core/generator.h)
    Normal,   // Box-Muller on the block's four words, in double
    Integer,  // integer_low + (the first two words) % range, as a double
  };
  Kind kind = Kind::Uniform;
  int bits = 24;
  double low = 0, span = 1;
  int64_t integer_low = 0;
  uint64_t range = 1;
};

}  // namespace loom::cuda
