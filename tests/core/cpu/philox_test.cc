// File: tests/core/cpu/philox_test.cc
// The bulk Philox blocks against philox_block, the one the GPU kernels and
// every other draw use: same bits for random seeds, first counters (across
// the 32-bit boundary of the counter's low word) and counts (partial batches).
#include "core/cpu/philox.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/generator.h"

namespace loom {
namespace {

TEST_CASE("philox_blocks gives philox_block's bits for every counter, in order") {
  std::mt19937_64 rng(34);
  for (int trial = 0; trial < 40; ++trial) {
    const uint64_t seed = rng();
    // Every third trial starts just below a carry into the counter's high word.
    const uint64_t first = trial % 3 == 0 ? (uint64_t{1} << 32) - rng() % 20 : rng();
    const int64_t count = static_cast<int64_t>(rng() % 70);
    CAPTURE(seed);
    CAPTURE(first);
    CAPTURE(count);
    std::vector<uint32_t> out(4 * count + 4, 0xDEADBEEFu);
    cpu::philox_blocks(seed, first, count, out.data());
    for (int64_t i = 0; i < count; ++i) {
      const PhiloxBlock want = philox_block(seed, first + static_cast<uint64_t>(i));
      for (int lane = 0; lane < 4; ++lane) REQUIRE(out[4 * i + lane] == want.lane[lane]);
    }
    for (int lane = 0; lane < 4; ++lane) CHECK(out[4 * count + lane] == 0xDEADBEEFu);  // nothing past the end
  }
}

// The integer threshold against uniform_float's comparison, at random p and at
// p on the 2^-24 grid (where rounding up or down would show).
TEST_CASE_TEMPLATE("dropout_apply drops exactly the values uniform_float puts below p", T, float, double) {
  std::mt19937_64 rng(808);
  for (int trial = 0; trial < 30; ++trial) {
    const uint64_t seed = rng(), first = rng();
    const int64_t n = static_cast<int64_t>(rng() % 3000);
    double p = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    if (trial % 3 == 0) p = std::ldexp(static_cast<double>(rng() % (uint64_t{1} << 24)), -24);
    if (trial == 1) p = 1.0;
    CAPTURE(p);
    CAPTURE(n);
    const T keep = static_cast<T>(1.0 / (1.0 - std::min(p, 0.999)));
    std::vector<T> in(n);
    for (T& v : in) v = static_cast<T>(std::uniform_real_distribution<double>(0.5, 2.0)(rng));
    std::vector<T> out(n + 1, T(-7));
    cpu::dropout_apply(seed, first, n, p, keep, in.data(), out.data());
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; ++i) {
      const PhiloxBlock block = philox_block(seed, first + static_cast<uint64_t>(i / 4));
      const T want = uniform_float(block.lane[i % 4]) < p ? T(0) : in[i] * keep;
      REQUIRE(out[i] == want);
      dropped += out[i] == T(0);
    }
    CHECK(out[n] == T(-7));
    if (p == 1.0) CHECK(dropped == n);
    cpu::dropout_apply(seed, first, n, p, keep, in.data(), in.data());  // in place: the same values
    CHECK(std::equal(in.begin(), in.end(), out.begin()));
  }
}

}  // namespace
}  // namespace loom
