// File: core/cpu/philox.h
// Philox blocks in bulk on the CPU: the numbers of philox_block
// (core/generator.h) for a run of consecutive counters, eight blocks at a
// time with their lanes in separate vectors, so that the compiler turns the
// rounds' 32x32->64 multiplies into vector ones (AVX-512, AVX2 or SSE2,
// whichever the CPU has, chosen at load time). Dropout draws from it.
#pragma once

#include <cstdint>

namespace loom::cpu {

// out[4 * i + lane] = philox_block(seed, first + i).lane[lane] for i in [0, count).
void philox_blocks(uint64_t seed, uint64_t first, int64_t count, uint32_t* out);

// Dropout applied without a mask: out[i] = in[i] * m for i in [0, n), m 0
// where value i of the blocks from `first` on (block i / 4, lane i % 4), as
// uniform_float makes it, is below p, else `keep`. T is float or double; in and
// out are dense and may be the same buffer.
template <class T>
void dropout_apply(uint64_t seed, uint64_t first, int64_t n, double p, T keep, const T* in, T* out);

}  // namespace loom::cpu
