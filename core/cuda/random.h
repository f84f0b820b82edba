// File: core/cuda/random.h
// Random fills drawn on the GPU from the same Philox4x32-10 blocks the CPU uses
// (core/generator.h), so a generator state gives the same numbers on either
// device. The caller asks philox_draw for the blocks it needs:
//
//   cuda::dropout_apply(out.strided(), in.strided(), p, cuda::philox_draw(gen, (n + 3) / 4));
//
// Element i is the i-th element in row-major order of the output's sizes,
// whatever its strides. Any floating dtype: 16-bit ones computed in float32
// and rounded once.
//
// Inside a CUDA-graph capture (cuda::CudaGraph) the draws are capturable: the
// kernels read the generator's (seed, offset) from device memory that each
// replay updates, and the generator advances on the host by the blocks one
// replay draws. A replayed step thus draws fresh numbers each time, the same
// bits as the eager step from the same generator state.
#pragma once

#include <cstdint>

#include "core/cuda/philox.h"
#include "core/generator.h"
#include "core/strided.h"

namespace loom::cuda {

// Reserves `blocks` Philox blocks of `gen`: now (eager), or in each replay of
// the graph being captured on the current stream.
PhiloxArgs philox_draw(Generator& gen, uint64_t blocks);

// The dropout op (core/ops/dropout.cc): out = in * m, m 0 where
// uniform_float(lane i % 4 of block i / 4) < p, else 1 / (1 - p), computed in
// float32 for 16-bit dtypes and rounded once: dropout's forward and, replaying
// the same draws, its backward, with no mask kept in between (dropout2d's mask
// is this of ones). out and in have the same sizes; any floating dtype. Uses
// (n + 3) / 4 blocks.
void dropout_apply(const Strided& out, const Strided& in, double p, const PhiloxArgs& philox);

// A random fill of out (any floating dtype; 16-bit ones drawn in float32 and
// rounded once, to nearest even): element i, in row-major order of out's sizes
// whatever its strides, is `draw` of block i. Uniform and Integer give the CPU's bits;
// Normal computes Box-Muller in double with the device's log and cos, which
// may differ from glibc's in the last bit or two, so its values match the
// CPU's to ~1e-15 relative rather than bit for bit. Uses n blocks.
void fill_random(const Strided& out, const RandomDraw& draw, const PhiloxArgs& philox);

}  // namespace loom::cuda
