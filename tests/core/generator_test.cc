// File: tests/core/generator_test.cc
// The Philox4x32-10 generator against Random123's known answers, and the
// random factories built on it: reproducibility, ranges and moments.
#include "core/generator.h"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "tests/testing.h"

namespace loom {
namespace {

using Words = std::array<uint32_t, 4>;

// Philox4x32-10 as the Random123 paper states it, with the full 128-bit counter
// and 64-bit key, to pin down our philox() where the published vectors cannot.
Words reference_philox(Words counter, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += 0x9E3779B9u;
      key[1] += 0xBB67AE85u;
    }
    uint64_t product0 = uint64_t{0xD2511F53u} * counter[0];
    uint64_t product1 = uint64_t{0xCD9E8D57u} * counter[2];
    counter = {static_cast<uint32_t>(product1 >> 32) ^ counter[1] ^ key[0],
               static_cast<uint32_t>(product1),
               static_cast<uint32_t>(product0 >> 32) ^ counter[3] ^ key[1],
               static_cast<uint32_t>(product0)};
  }
  return counter;
}

TEST_CASE("the reference Philox reproduces all three Random123 known-answer vectors") {
  CHECK(reference_philox({0, 0, 0, 0}, {0, 0}) ==
        Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(reference_philox({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                         {0xffffffff, 0xffffffff}) ==
        Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(reference_philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                         {0xa4093822, 0x299f31d0}) ==
        Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("philox(seed 0, counter 0) is the Random123 Philox4x32-10 known answer") {
  CHECK(philox(0, 0) == Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
}

TEST_CASE("philox puts the counter in words 0-1 and the seed in the key, low word first") {
  const uint64_t seeds[] = {0, 1, 42, 0x299f31d0a4093822ull, Generator::kDefaultSeed, ~0ull};
  const uint64_t counters[] = {0, 1, 7, 0xffffffffull, 0x100000000ull, 0x85a308d3243f6a88ull};
  for (uint64_t seed : seeds) {
    for (uint64_t counter : counters) {
      CAPTURE(seed);
      CAPTURE(counter);
      Words expected = reference_philox(
          {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
          {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
      CHECK(philox(seed, counter) == expected);
    }
  }
}

TEST_CASE("uniform_float and uniform_double stay in [0, 1)") {
  CHECK(uniform_float(0) == 0.0f);
  CHECK(uniform_float(0xffffffffu) < 1.0f);
  CHECK(uniform_float(0xffffffffu) == 1.0f - 0x1p-24f);
  CHECK(uniform_float(0x80000000u) == 0.5f);
  CHECK(uniform_double(0, 0) == 0.0);
  CHECK(uniform_double(0xffffffffu, 0xffffffffu) < 1.0);
  CHECK(uniform_double(0xffffffffu, 0xffffffffu) == 1.0 - 0x1p-53);
  CHECK(uniform_double(0x80000000u, 0) == 0.5);
}

TEST_CASE("uniform_unit keeps the top `bits` bits, rounds to nothing in a dtype that holds them, stays below 1") {
  const uint32_t all[2] = {0xffffffffu, 0xffffffffu};
  for (int bits : {8, 11, 24}) {
    CAPTURE(bits);
    CHECK(uniform_unit(all, bits) == 1.0 - std::ldexp(1.0, -bits));
    // Two words each, as a draw hands out: uniform_unit reads the second for float64.
    const uint32_t half[2] = {0x80000000u, 0xffffffffu};
    CHECK(uniform_unit(half, bits) == 0.5);
    const uint32_t below[2] = {(uint32_t{1} << (32 - bits)) - 1, 0xffffffffu};  // only bits it drops
    CHECK(uniform_unit(below, bits) == 0.0);
  }
  CHECK(static_cast<float>(uniform_unit(all, 24)) < 1.0f);
  CHECK(uniform_unit(all, kTwoWordBits) == uniform_double(all[0], all[1]));
}

TEST_CASE("integer_value: low plus the two words modulo the range; normal_value: finite at the extremes") {
  const uint32_t words[4] = {0x00000001u, 0x00000005u, 0u, 0u};  // 2^32 + 5
  CHECK(integer_value(words, -3, 7) == static_cast<double>(-3 + static_cast<int64_t>(((uint64_t{1} << 32) + 5) % 7)));
  CHECK(integer_value(words, 10, 1) == 10.0);
  const uint32_t zeros[4] = {0u, 0u, 0u, 0u}, ones[4] = {~0u, ~0u, ~0u, ~0u};
  CHECK(normal_value(zeros) == 0.0);  // u1 = 1: the radius is 0
  CHECK(std::isfinite(normal_value(ones)));  // u1 = 2^-53: log stays finite
  CHECK(normal_value(ones) > 8.0);
}

TEST_CASE("Generator state: reserve advances the offset, manual_seed resets it") {
  Generator gen(5);
  CHECK(gen.seed() == 5);
  CHECK(gen.offset() == 0);
  CHECK(gen.reserve(10) == 0);
  CHECK(gen.reserve(3) == 10);
  CHECK(gen.offset() == 13);
  gen.manual_seed(9);
  CHECK(gen.seed() == 9);
  CHECK(gen.offset() == 0);
  gen.set_state(4, 100);
  CHECK(gen.reserve(1) == 100);
  CHECK(Generator().seed() == Generator::kDefaultSeed);
}

TEST_CASE("element i of rand uses Philox block offset + i, so draws split freely") {
  Generator gen(1234);
  std::vector<double> whole = rand({6}, {}, &gen).to_vector<double>();
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(whole[i] == static_cast<double>(uniform_float(philox(1234, i)[0])));
  }
  Generator split(1234);
  std::vector<double> first = rand({2}, {}, &split).to_vector<double>();
  std::vector<double> rest = rand({4}, {}, &split).to_vector<double>();
  first.insert(first.end(), rest.begin(), rest.end());
  CHECK(first == whole);
  CHECK(split.offset() == 6);
}

TEST_CASE("a tensor of many staging chunks draws the same bits on 1 and 3 threads") {
  const int previous = num_threads();
  const int64_t n = 3 * 65536 + 17;  // the last chunk is partial
  set_num_threads(1);
  Generator a(99);
  const std::vector<double> serial = randn({n}, {}, &a).to_vector<double>();
  set_num_threads(3);
  Generator b(99);
  const std::vector<double> parallel = randn({n}, {}, &b).to_vector<double>();
  set_num_threads(previous);
  CHECK(parallel == serial);
  CHECK(b.offset() == static_cast<uint64_t>(n));
  Generator c(99);
  c.reserve(static_cast<uint64_t>(n - 1));
  CHECK(randn({1}, {}, &c).to_vector<double>()[0] == serial.back());  // element i at offset i
}

TEST_CASE("uniform_ fills any layout with rand's draws scaled and shifted, bit for bit") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    CAPTURE(dtype_name(dtype));
    Generator a(21), b(21);
    Tensor t = empty({4, 3, 70, 70}, {.dtype = dtype, .memory_format = MemoryFormat::ChannelsLast});
    t.uniform_(-0.3, 0.7, &a);
    const Tensor composed = rand({4, 3, 70, 70}, {.dtype = dtype}, &b) * (0.7 - -0.3) + -0.3;
    CHECK(t.is_contiguous(MemoryFormat::ChannelsLast));  // written in place, its layout kept
    CHECK_CLOSE(t, composed, 0, 0);
    CHECK(a.offset() == b.offset());
    const testing::Moments m = testing::moments(t);
    CHECK(m.min >= -0.3);
    CHECK(m.max < 0.7);
  }
  Tensor ints = zeros({3}, {.dtype = DType::Int64});
  CHECK_THROWS_AS(ints.uniform_(0, 1), TypeError);
  Tensor x = zeros({3});
  CHECK_THROWS_AS(x.uniform_(1, 0), ValueError);
  CHECK_THROWS_AS(x.uniform_(0, std::numeric_limits<double>::infinity()), ValueError);
  Tensor leaf = zeros({3}).requires_grad_(true);
  CHECK_THROWS_AS(leaf.uniform_(0, 1), AutogradError);  // in place on a leaf that requires grad
}

TEST_CASE("the same seed gives the same rand / randn / randint; other seeds differ") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Generator a(7), b(7), c(8);
    CHECK_CLOSE(rand({50}, {.dtype = dtype}, &a), rand({50}, {.dtype = dtype}, &b), 0, 0);
    CHECK_CLOSE(randn({3, 5}, {.dtype = dtype}, &a), randn({3, 5}, {.dtype = dtype}, &b), 0, 0);
    const TensorOptions int64 = {.dtype = DType::Int64};
    CHECK_CLOSE(randint(-5, 5, {20}, int64, &a), randint(-5, 5, {20}, int64, &b), 0, 0);
    Generator a2(7);
    const std::vector<double> x = rand({50}, {.dtype = dtype}, &a2).to_vector<double>();
    CHECK(x != rand({50}, {.dtype = dtype}, &c).to_vector<double>());
    CHECK(x != rand({50}, {.dtype = dtype}, &a2).to_vector<double>());  // the offset moved on
  }
}

TEST_CASE("the default generator is reproducible through manual_seed") {
  manual_seed(99);
  const std::vector<double> first = randn({10}).to_vector<double>();
  const std::vector<double> second = randn({10}).to_vector<double>();
  manual_seed(99);
  CHECK(randn({10}).to_vector<double>() == first);
  CHECK(first != second);
  Generator same(99);
  CHECK(randn({10}, {}, &same).to_vector<double>() == first);
}

using testing::Moments;
using testing::moments;

TEST_CASE("randn: 100k draws have mean 0 and std 1 within 0.01") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Generator gen(2024);
    Moments m = moments(randn({100000}, {.dtype = dtype}, &gen));
    CAPTURE(dtype_name(dtype));
    CHECK(std::fabs(m.mean) < 0.01);
    CHECK(std::fabs(std::sqrt(m.var) - 1.0) < 0.01);
    CHECK(m.min < -3.5);  // the tails are there
    CHECK(m.max > 3.5);
  }
}

TEST_CASE("rand: float32 and float64 values lie in [0, 1) with mean 1/2 and std 1/sqrt(12)") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Generator gen(31);
    Moments m = moments(rand({100000}, {.dtype = dtype}, &gen));
    CAPTURE(dtype_name(dtype));
    CHECK(m.min >= 0.0);
    CHECK(m.max < 1.0);
    CHECK(std::fabs(m.mean - 0.5) < 0.005);
    CHECK(std::fabs(std::sqrt(m.var) - 1.0 / std::sqrt(12.0)) < 0.005);
  }
}

TEST_CASE("rand: float16 and bfloat16 values also stay below 1") {
  // A float32 draw in [1 - 2^-12, 1) rounds up to 1.0 when stored as float16
  // (2^-9 for bfloat16), so 100k draws hit 1.0 unless rand draws fewer bits.
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    Generator gen(32);
    Moments m = moments(rand({100000}, {.dtype = dtype}, &gen));
    CAPTURE(dtype_name(dtype));
    CHECK(m.min >= 0.0);
    CHECK(m.max < 1.0);
  }
}

TEST_CASE("uniform_ fills float16 and bfloat16 CPU tensors, computing in float") {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    CAPTURE(dtype_name(dtype));
    Generator gen(33);
    Tensor t = empty({100000}, {.dtype = dtype});
    t.uniform_(-2.0, 6.0, &gen);
    const Moments m = moments(t);
    CHECK(m.min >= -2.0);
    CHECK(m.max <= 6.0);  // a draw just below 6 may round up to it in 16 bits
    CHECK(std::fabs(m.mean - 2.0) < 0.03);  // 4 standard errors
    CHECK(std::sqrt(m.var) == doctest::Approx(8.0 / std::sqrt(12.0)).epsilon(0.01));
  }
}

TEST_CASE("randint: values in [low, high), every value about equally often") {
  Generator gen(77);
  // Passing a generator means spelling out the options: `{}` would mean float32.
  const Tensor t = randint(-3, 7, {100000}, {.dtype = DType::Int64}, &gen);
  CHECK(t.dtype() == DType::Int64);
  CHECK(randint(0, 2, {1}).dtype() == DType::Int64);
  std::vector<int64_t> counts(10, 0);
  for (int64_t v : t.to_vector<int64_t>()) {
    REQUIRE(v >= -3);
    REQUIRE(v < 7);
    ++counts[v + 3];
  }
  for (int64_t c : counts) {
    CHECK(c > 9500);  // expected 10000, std about 95
    CHECK(c < 10500);
  }
  Generator small(78);
  CHECK(randint(4, 5, {10}, {.dtype = DType::Int32}, &small).to_vector<int32_t>() ==
        std::vector<int32_t>(10, 4));
}

TEST_CASE("random factories reject bad arguments") {
  CHECK_THROWS_WITH_FRAGMENT(randint(5, 5, {3}), ValueError, "[randint] needs low < high, got low 5 and high 5");
  CHECK_THROWS_WITH_FRAGMENT(rand({3}, {.dtype = DType::Int64}), TypeError, "[rand] needs a floating dtype, got int64");
  CHECK_THROWS_WITH_FRAGMENT(randn({3}, {.dtype = DType::Bool}), TypeError, "[randn] needs a floating dtype, got bool");
  CHECK_THROWS_WITH_FRAGMENT(randn({2, -1}), ValueError, "(2, -1)");
  CHECK_THROWS_WITH_FRAGMENT(randint(0, 3, {2}, {.dtype = DType::Int64, .requires_grad = true}),
                             TypeError, "int64");
}

}  // namespace
}  // namespace loom
