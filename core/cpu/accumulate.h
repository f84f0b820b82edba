// File: core/cpu/accumulate.h
// Sums over a contiguous run in double, the way every CPU kernel that reduces
// many terms accumulates.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace loom::cpu {

// The sum of f(run[i]) over i in [0, n), in double. Eight interleaved partial
// sums, combined in a fixed order, let the compiler vectorize a loop that one
// running sum would serialize on the add latency; the order depends only on n,
// so a kernel gives the same bits at every thread count.
template <class T, class Fn>
double sum_run(const T* run, int64_t n, Fn&& f) {
  double partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) partial[j] += f(static_cast<double>(run[i + j]));
  }
  double tail = 0.0;
  for (; i < n; ++i) tail += f(static_cast<double>(run[i]));
  return ((partial[0] + partial[4]) + (partial[1] + partial[5])) +
         ((partial[2] + partial[6]) + (partial[3] + partial[7])) + tail;
}

// v where keep, else +0, without a branch (a ReLU mask is unpredictable, and a
// branch keeps the loop from vectorizing); exact, NaN included.
template <class T>
T keep_if(bool keep, T v) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  return std::bit_cast<T>(std::bit_cast<Bits>(v) & (Bits(0) - Bits(keep)));
}

}  // namespace loom::cpu
