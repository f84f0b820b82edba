// File: data/sampler.h
// The order an epoch visits a data set in, and each visit's augmentation, as a
// pure function of (seed, epoch): a resumed run that calls set_epoch(e) sees
// exactly the batches an uninterrupted run saw in epoch e, and worker threads
// cannot change them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/generator.h"
#include "data/transforms.h"

namespace loom::data {

// A uniformly random permutation of 0 .. n-1 (Fisher-Yates); swap i draws
// Philox block i of the n reserved from `gen`. (64-bit draws reduced modulo at
// most n: the bias is below n / 2^64.)
std::vector<int64_t> random_permutation(int64_t n, Generator& gen);

// Counters of one seed, split by epoch: epoch e owns Philox blocks
// [e * kEpochBlocks, (e + 1) * kEpochBlocks); the shuffle draws from the first
// half and position i of the epoch draws its Placement from block
// e * kEpochBlocks + kEpochBlocks / 2 + i.
constexpr uint64_t kEpochBlocks = uint64_t{1} << 40;

struct EpochPlan {
  std::vector<int64_t> order;         // sample index at each position of the epoch
  std::vector<Placement> placements;  // each position's crop and flip
};

// The plan of epoch `epoch` for n samples: order 0 .. n-1 unless shuffle.
EpochPlan plan_epoch(int64_t n, bool shuffle, const Augment& augment, uint64_t seed, int64_t epoch);

}  // namespace loom::data
