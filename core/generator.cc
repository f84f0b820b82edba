// File: core/generator.cc
// The default generator and the Philox4x32-10 block function.
#include "core/generator.h"

namespace loom {

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

std::array<uint32_t, 4> philox(uint64_t seed, uint64_t counter) {
  const PhiloxBlock block = philox_block(seed, counter);
  return {block.lane[0], block.lane[1], block.lane[2], block.lane[3]};
}

}  // namespace loom
