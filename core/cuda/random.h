// File: core/cuda/random.h
// Random fills drawn on the GPU from the same Philox4x32-10 blocks the CPU uses
// (core/generator.h), so a (seed, first_block) pair gives the same numbers on
// either device. The caller reserves the blocks from its Generator:
//
//   uint64_t first = gen.reserve((n + 3) / 4);
//   cuda::dropout_mask(mask.strided(), p, gen.seed(), first);
//
// Element i is the i-th element in row-major order of the output's sizes,
// whatever its strides. Outputs are float32 or float64.
#pragma once

#include <cstdint>

#include "core/strided.h"

namespace loom::cuda {

// The dropout op's mask (core/ops/dropout.cc): element i reads lane i % 4 of
// block first_block + i / 4 and is 0 where uniform_float(lane) < p, else
// 1 / (1 - p). Uses (n + 3) / 4 blocks.
void dropout_mask(const Strided& mask, double p, uint64_t seed, uint64_t first_block);

// rand's draws (core/factory.cc): element i uses block first_block + i;
// uniform_float(lane 0) for float32, uniform_double(lanes 0, 1) for float64.
// Identical bits to the CPU. Uses n blocks.
void fill_uniform(const Strided& out, uint64_t seed, uint64_t first_block);

// randn's draws: Box-Muller on block first_block + i, computed in double. The
// device's log and cos may differ from glibc's in the last bit or two, so values
// match the CPU's to ~1e-15 relative rather than bit for bit. Uses n blocks.
void fill_normal(const Strided& out, uint64_t seed, uint64_t first_block);

}  // namespace loom::cuda
