// File: core/generator.h
// A seeded counter-based generator (Philox4x32-10). Its whole state is
// (seed, offset), so it is cheap to save in a checkpoint, and a GPU kernel given
// the same (seed, offset) draws the same numbers as the CPU.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>

// The Philox block and the uniform conversions below compile for the GPU too,
// so CUDA kernels draw exactly what the CPU draws (core/cuda/random.cu).
#include "core/kernel/host_device.h"

namespace loom {

class Generator {
 public:
  explicit Generator(uint64_t seed = kDefaultSeed) : seed_(seed) {}

  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `blocks` Philox blocks; returns the first counter to use.
  uint64_t reserve(uint64_t blocks) {
    uint64_t first = offset_;
    offset_ += blocks;
    return first;
  }

  static constexpr uint64_t kDefaultSeed = 67280421310721ull;

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when an op is given none.
Generator& default_generator();
void manual_seed(uint64_t seed);

// One Philox4x32-10 block: four independent 32-bit values for (seed, counter).
std::array<uint32_t, 4> philox(uint64_t seed, uint64_t counter);

// The same block as a plain struct (no std::array in device code): philox()
// and the GPU kernels both call this one implementation.
struct PhiloxBlock {
  uint32_t lane[4];
};

// Philox4x32-10 (Salmon et al., SC'11): ten rounds of two 32x32->64 multiplies
// over a 128-bit counter, keyed by the 64-bit seed.
LOOM_HOST_DEVICE inline PhiloxBlock philox_block(uint64_t seed, uint64_t counter) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  PhiloxBlock c = {{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u}};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c.lane[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c.lane[2];
    c = {{static_cast<uint32_t>(p1 >> 32) ^ c.lane[1] ^ k0, static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c.lane[3] ^ k1, static_cast<uint32_t>(p0)}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

// Uniform in [0, 1) from 32 or 64 random bits.
LOOM_HOST_DEVICE inline float uniform_float(uint32_t bits) {
  return static_cast<float>(bits >> 8) * 0x1p-24f;
}
LOOM_HOST_DEVICE inline double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

// The draws of rand, randn and randint from one Philox block's words, shared
// by the CPU (core/factory.cc) and the GPU's fill (core/cuda/random.cu), so a
// generator state gives the same value on either device.

// The random bits that take two words: float64's significand.
inline constexpr int kTwoWordBits = 53;

// rand's unit in [0, 1) from `bits` random bits (as many as the dtype's
// significand holds, so rounding to it never gives 1.0): exact in double.
LOOM_HOST_DEVICE inline double uniform_unit(const uint32_t* words, int bits) {
  if (bits == kTwoWordBits) return uniform_double(words[0], words[1]);
  return static_cast<double>(words[0] >> (32 - bits)) / static_cast<double>(uint64_t{1} << bits);
}

// randn: the Box-Muller transform of the four words, in double.
LOOM_HOST_DEVICE inline double normal_value(const uint32_t* words) {
  const double u1 = 1.0 - uniform_double(words[0], words[1]);  // (0, 1]: log stays finite
  const double u2 = uniform_double(words[2], words[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// randint: low + (the first two words) % range, as a double (exact below 2^53,
// rounded alike above).
LOOM_HOST_DEVICE inline double integer_value(const uint32_t* words, int64_t low, uint64_t range) {
  const uint64_t r = (static_cast<uint64_t>(words[0]) << 32) | words[1];
  return static_cast<double>(low + static_cast<int64_t>(r % range));
}

}  // namespace loom
