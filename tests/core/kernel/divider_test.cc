// File: tests/core/kernel/divider_test.cc
// The 32-bit index divider against the 64-bit division it replaces: every
// divisor up to 4096 with the dividends around each multiple, divisors near
// powers of two and near 2^31, and random pairs over the whole narrow range.
#include "core/kernel/divider.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using loom::kernel::math::divide;
using loom::kernel::math::divider_for;
using loom::kernel::math::kNarrowIndexLimit;
using loom::kernel::math::split_index;

constexpr int64_t kLargestDividend = kNarrowIndexLimit - 1;

// Checks divide() for `divisor` at `n`; returns whether it matched.
bool divides_right(int64_t divisor, int64_t n) {
  const uint32_t got = divide(static_cast<uint32_t>(n), divider_for(divisor));
  return static_cast<int64_t>(got) == n / divisor;
}

}  // namespace

TEST_CASE("divide matches 64-bit division around every multiple of small divisors") {
  int64_t mismatches = 0;
  for (int64_t divisor = 1; divisor <= 4096; ++divisor) {
    for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{7}, kLargestDividend / divisor}) {
      for (int64_t delta = -1; delta <= 1; ++delta) {
        const int64_t n = k * divisor + delta;
        if (n < 0 || n > kLargestDividend) continue;
        if (!divides_right(divisor, n)) ++mismatches;
      }
    }
    if (!divides_right(divisor, kLargestDividend)) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("divide matches 64-bit division for divisors near powers of two and near 2^31") {
  std::vector<int64_t> divisors;
  for (int shift = 1; shift <= 30; ++shift) {
    for (int64_t delta = -1; delta <= 1; ++delta) divisors.push_back((int64_t{1} << shift) + delta);
  }
  divisors.push_back(kLargestDividend);
  divisors.push_back(kLargestDividend - 1);
  divisors.push_back(46341);  // its square passes 2^31
  int64_t mismatches = 0;
  for (int64_t divisor : divisors) {
    for (int64_t n : {int64_t{0}, divisor - 1, divisor, divisor + 1, 2 * divisor - 1,
                      kLargestDividend - 1, kLargestDividend}) {
      if (n < 0 || n > kLargestDividend) continue;
      if (!divides_right(divisor, n)) {
        ++mismatches;
        MESSAGE("divisor " << divisor << ", dividend " << n);
      }
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("divide matches 64-bit division on random pairs") {
  std::mt19937_64 rng(20261129);
  std::uniform_int_distribution<int64_t> dividend(0, kLargestDividend);
  std::uniform_int_distribution<int> bits(0, 30);
  int64_t mismatches = 0;
  for (int trial = 0; trial < 1000000; ++trial) {
    const int64_t limit = int64_t{1} << bits(rng);
    const int64_t divisor = std::uniform_int_distribution<int64_t>(1, limit)(rng);
    if (!divides_right(divisor, dividend(rng))) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("split_index gives the remainder and leaves the quotient, narrow or not") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 100000; ++trial) {
    const int64_t size = std::uniform_int_distribution<int64_t>(1, 1 << 20)(rng);
    const int64_t n = std::uniform_int_distribution<int64_t>(0, kLargestDividend)(rng);
    int64_t narrow = n, wide = n;
    const int64_t narrow_remainder = split_index(&narrow, size, divider_for(size), true);
    const int64_t wide_remainder = split_index(&wide, size, {}, false);
    REQUIRE(narrow_remainder == n % size);
    REQUIRE(narrow == n / size);
    REQUIRE(wide_remainder == n % size);
    REQUIRE(wide == n / size);
  }
  // Past 2^31 only the 64-bit path is taken, and it stays exact.
  int64_t big = (int64_t{1} << 40) + 12345;
  CHECK(split_index(&big, 1000, {}, false) == ((int64_t{1} << 40) + 12345) % 1000);
  CHECK(big == ((int64_t{1} << 40) + 12345) / 1000);
}
