// File: data/sampler.cc
// Seeded per-epoch permutations and placements.
#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "core/error.h"

namespace loom::data {

std::vector<int64_t> random_permutation(int64_t n, Generator& gen) {
  LOOM_CHECK(n >= 0, ValueError, "[random_permutation] n must be >= 0, got {}", n);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  const uint64_t first = gen.reserve(n);
  for (int64_t i = n - 1; i > 0; --i) {
    const PhiloxBlock bits = philox_block(gen.seed(), first + i);
    const uint64_t r = (uint64_t{bits.lane[0]} << 32) | bits.lane[1];
    std::swap(order[i], order[r % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

EpochPlan plan_epoch(int64_t n, bool shuffle, const Augment& augment, uint64_t seed,
                     int64_t epoch) {
  constexpr int64_t kMaxEpochs = int64_t{1} << 24;  // kMaxEpochs * kEpochBlocks = 2^64
  LOOM_CHECK(epoch >= 0 && epoch < kMaxEpochs, ValueError,
             "[DataLoader] epoch must be in [0, {}), got {}", kMaxEpochs, epoch);
  LOOM_CHECK(static_cast<uint64_t>(n) < kEpochBlocks / 2, ValueError,
             "[DataLoader] {} samples exceed the {} an epoch's counters cover", n,
             kEpochBlocks / 2);
  const uint64_t base = static_cast<uint64_t>(epoch) * kEpochBlocks;
  EpochPlan plan;
  if (shuffle) {
    Generator gen;
    gen.set_state(seed, base);
    plan.order = random_permutation(n, gen);
  } else {
    plan.order.resize(n);
    std::iota(plan.order.begin(), plan.order.end(), int64_t{0});
  }
  plan.placements = draw_placements(n, augment, seed, base + kEpochBlocks / 2);
  return plan;
}

}  // namespace loom::data
