// File: tests/data/distributed_sampler_test.cc
// Tests of DistributedSampler (shards, PyTorch's padding, drop_last, shuffle) and gather.
#include "data/distributed_sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "data/sampler.h"
#include "tests/testing.h"

using namespace loom;
using namespace loom::data;

namespace {

std::vector<std::vector<int64_t>> shards(int64_t n, int64_t ranks, bool drop_last, int64_t epoch,
                                         bool shuffle = true) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < ranks; ++r) {
    DistributedSampler sampler(n, {.num_replicas = ranks, .rank = r, .shuffle = shuffle,
                                   .seed = 7, .drop_last = drop_last});
    sampler.set_epoch(epoch);
    out.push_back(sampler.indices());
    CHECK(static_cast<int64_t>(out.back().size()) == sampler.num_samples());
  }
  return out;
}

}  // namespace

TEST_CASE("DistributedSampler: disjoint shards that cover the set when the ranks divide it") {
  auto parts = shards(12, 4, false, 0);
  std::set<int64_t> seen;
  for (const auto& part : parts) {
    CHECK(part.size() == 3);
    for (int64_t i : part) CHECK(seen.insert(i).second);
  }
  CHECK(seen.size() == 12);
}

TEST_CASE("DistributedSampler: padding repeats the first samples of the order, as PyTorch") {
  // 10 samples over 4 ranks: ceil = 3 each, total 12, positions 10 and 11 repeat 0 and 1.
  auto parts = shards(10, 4, false, 0, /*shuffle=*/false);
  CHECK(parts[0] == std::vector<int64_t>{0, 4, 8});
  CHECK(parts[1] == std::vector<int64_t>{1, 5, 9});
  CHECK(parts[2] == std::vector<int64_t>{2, 6, 0});
  CHECK(parts[3] == std::vector<int64_t>{3, 7, 1});
  // A set smaller than the ranks is repeated as often as needed.
  auto tiny = shards(1, 3, false, 0);
  for (const auto& part : tiny) CHECK(part == std::vector<int64_t>{0});
}

TEST_CASE("DistributedSampler: drop_last drops the tail and keeps the shards disjoint") {
  auto parts = shards(10, 4, true, 3);
  std::set<int64_t> seen;
  for (const auto& part : parts) {
    CHECK(part.size() == 2);
    for (int64_t i : part) CHECK(seen.insert(i).second);
  }
  CHECK(seen.size() == 8);
  CHECK_THROWS_WITH_FRAGMENT(DistributedSampler(3, {.num_replicas = 4, .rank = 0, .drop_last = true}),
                             ValueError, "cannot feed 4 ranks");
}

TEST_CASE("DistributedSampler: the shuffle is the same on every rank and changes with the epoch") {
  // Interleaving the ranks' shards rebuilds one permutation: the ranks agree on it.
  auto epoch0 = shards(64, 4, false, 0), again = shards(64, 4, false, 0);
  auto epoch1 = shards(64, 4, false, 1);
  CHECK(epoch0 == again);
  CHECK(epoch0 != epoch1);
  std::vector<int64_t> order;
  for (size_t i = 0; i < 16; ++i) {
    for (int r = 0; r < 4; ++r) order.push_back(epoch0[r][i]);
  }
  // One rank sees exactly the DataLoader's shuffle of the same seed and epoch.
  CHECK(order == plan_epoch(64, true, {}, 7, 0).order);
  CHECK(shards(64, 1, false, 5)[0] == plan_epoch(64, true, {}, 7, 5).order);
}

TEST_CASE("DistributedSampler: bad ranks are refused") {
  CHECK_THROWS_WITH_FRAGMENT(DistributedSampler(10, {.num_replicas = 2, .rank = 2}), ValueError,
                             "rank 2 is not in [0, num_replicas 2)");
}

TEST_CASE("gather copies the chosen samples and labels, repeats included") {
  Dataset set{arange(4 * 1 * 2 * 2, {.dtype = DType::UInt8}).view({4, 1, 2, 2}),
              tensor({10, 11, 12, 13}, {4}, {.dtype = DType::Int64})};
  Dataset out = gather(set, {3, 0, 3});
  CHECK(out.labels.to_vector<int64_t>() == std::vector<int64_t>{13, 10, 13});
  CHECK(out.images.select(0, 0).to_vector<int64_t>() == std::vector<int64_t>{12, 13, 14, 15});
  CHECK(out.images.select(0, 1).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK_THROWS_WITH_FRAGMENT(gather(set, {4}), IndexError, "index 4 at position 0");
}
