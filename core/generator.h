// File: core/generator.h
// A seeded counter-based generator (Philox4x32-10). Its whole state is
// (seed, offset), so it is cheap to save in a checkpoint, and a GPU kernel given
// the same (seed, offset) draws the same numbers as the CPU.
#pragma once

#include <array>
#include <cstdint>

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

// Uniform in [0, 1) from 32 or 64 random bits.
inline float uniform_float(uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1p-24f; }
inline double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

}  // namespace loom
