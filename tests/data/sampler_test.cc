// File: tests/data/sampler_test.cc
// Epoch plans: permutations are permutations, seeded and uniform-looking; the
// plan of an epoch depends on (seed, epoch) only.
#include "data/sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST_CASE("random_permutation is a seeded permutation that reserves n blocks") {
  Generator a(9), b(9), c(10);
  const std::vector<int64_t> p = random_permutation(1000, a);
  CHECK(a.offset() == 1000);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == iota(1000));
  CHECK(p != iota(1000));
  CHECK(random_permutation(1000, b) == p);
  CHECK(random_permutation(1000, c) != p);
  CHECK(random_permutation(1, a) == std::vector<int64_t>{0});
  CHECK(random_permutation(0, a).empty());
}

TEST_CASE("every position receives every element about equally often") {
  // 3000 permutations of 4: each (position, value) pair expects 750.
  Generator gen(3);
  int64_t counts[4][4] = {};
  for (int t = 0; t < 3000; ++t) {
    const std::vector<int64_t> p = random_permutation(4, gen);
    for (int i = 0; i < 4; ++i) ++counts[i][p[i]];
  }
  for (auto& row : counts) {
    for (int64_t count : row) {
      CHECK(count > 650);
      CHECK(count < 850);
    }
  }
}

TEST_CASE("plan_epoch: fixed order without shuffle, (seed, epoch) decides the rest") {
  const EpochPlan plain = plan_epoch(50, false, {}, 1, 3);
  CHECK(plain.order == iota(50));
  CHECK(plain.placements.size() == 50);

  const Augment augment{.padding = 2, .flip = true};
  const EpochPlan e0 = plan_epoch(50, true, augment, 1, 0);
  const EpochPlan e1 = plan_epoch(50, true, augment, 1, 1);
  CHECK(e0.order != e1.order);
  CHECK(plan_epoch(50, true, augment, 1, 0).order == e0.order);
  CHECK(plan_epoch(50, true, augment, 2, 0).order != e0.order);
  bool placements_differ = false;
  for (int i = 0; i < 50; ++i) {
    placements_differ |= e0.placements[i].top != e1.placements[i].top ||
                         e0.placements[i].flip != e1.placements[i].flip;
  }
  CHECK(placements_differ);
  CHECK_THROWS_WITH_FRAGMENT(plan_epoch(5, true, {}, 1, -1), ValueError,
                             "epoch must be in [0, 16777216), got -1");
}

}  // namespace
}  // namespace loom::data
