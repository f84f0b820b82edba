// File: core/cpu/philox.cc
// Philox4x32-10 over eight counters at once (philox.h). The rounds are
// philox_block's (core/generator.h), written over vectors of lanes instead of one
// block; tests/core/cpu/philox_test.cc checks that both give the same bits.
#include "core/cpu/philox.h"

#include <algorithm>
#include <cmath>

namespace loom::cpu {
namespace {

constexpr uint64_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
constexpr uint64_t kLow = 0xFFFFFFFFu;

// Eight 32-bit values, each in the low half of a 64-bit lane: a lane's product
// by a 32-bit constant is then one unsigned 32x32->64 vector multiply.
using Lanes = uint64_t __attribute__((vector_size(64)));
constexpr int kWidth = 8;

}  // namespace

// On x86-64, one clone per instruction set: the load-time resolver picks the
// widest the CPU runs (the build targets baseline x86-64, whose SSE2 multiplies
// two 64-bit products an instruction; AVX-512 multiplies eight). Elsewhere the
// compiler's own vector width.
#if defined(__x86_64__)
#define LOOM_PHILOX_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#else
#define LOOM_PHILOX_CLONES
#endif

LOOM_PHILOX_CLONES
void philox_blocks(uint64_t seed, uint64_t first, int64_t count, uint32_t* out) {
  for (int64_t begin = 0; begin < count; begin += kWidth) {
    Lanes c0, c1, c2 = {}, c3 = {};
    for (int j = 0; j < kWidth; ++j) {
      const uint64_t counter = first + static_cast<uint64_t>(begin + j);
      c0[j] = counter & kLow;
      c1[j] = counter >> 32;
    }
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const Lanes p0 = (c0 & kLow) * kMul0, p1 = (c2 & kLow) * kMul1;
      c0 = (p1 >> 32) ^ c1 ^ k0;
      c1 = p1 & kLow;
      c2 = (p0 >> 32) ^ c3 ^ k1;
      c3 = p0 & kLow;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    const int64_t blocks = std::min<int64_t>(kWidth, count - begin);
    for (int64_t j = 0; j < blocks; ++j) {
      uint32_t* block = out + 4 * (begin + j);
      block[0] = static_cast<uint32_t>(c0[j]);
      block[1] = static_cast<uint32_t>(c1[j]);
      block[2] = static_cast<uint32_t>(c2[j]);
      block[3] = static_cast<uint32_t>(c3[j]);
    }
  }
}

namespace {

// Calls store(i, dropped) for i in [0, n): whether value i of the blocks from
// `first` on is dropped. uniform_float(bits) < p compares (bits >> 8) * 2^-24,
// exactly, with p: for the integer bits >> 8 that is (bits >> 8) <
// ceil(p * 2^24), one integer comparison the callers' loops vectorize.
template <class Store>
void draw_dropped(uint64_t seed, uint64_t first, int64_t n, double p, Store store) {
  constexpr int64_t kBatchBlocks = 256;
  const auto threshold = static_cast<uint32_t>(std::ceil(std::ldexp(p, 24)));
  uint32_t bits[4 * kBatchBlocks];
  for (int64_t begin = 0; begin < n; begin += 4 * kBatchBlocks) {
    const int64_t values = std::min(4 * kBatchBlocks, n - begin);
    philox_blocks(seed, first + static_cast<uint64_t>(begin / 4), (values + 3) / 4, bits);
    for (int64_t i = 0; i < values; ++i) store(begin + i, (bits[i] >> 8) < threshold);
  }
}

}  // namespace

template <class T>
void dropout_apply(uint64_t seed, uint64_t first, int64_t n, double p, T keep, const T* in, T* out) {
  draw_dropped(seed, first, n, p, [&](int64_t i, bool dropped) { out[i] = in[i] * (dropped ? T(0) : keep); });
}

template void dropout_apply<float>(uint64_t, uint64_t, int64_t, double, float, const float*, float*);
template void dropout_apply<double>(uint64_t, uint64_t, int64_t, double, double, const double*, double*);

}  // namespace loom::cpu
