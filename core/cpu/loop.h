// File: core/cpu/loop.h
// The one strided loop every elementwise kernel uses.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/parallel.h"
#include "core/shape.h"
#include "core/strided.h"

namespace loom::cpu {

// Calls fn(offsets) for every index of `sizes` in row-major order, where
// offsets[k] is the element offset of that index in operand k (strides[k]).
template <size_t K, class Fn>
void for_each_offset(const Shape& sizes, const std::array<const Shape*, K>& strides, Fn&& fn) {
  int64_t n = numel_of(sizes);
  if (n == 0) return;
  std::array<int64_t, K> base{};
  if (sizes.empty()) {
    fn(base);
    return;
  }
  const size_t last = sizes.size() - 1;
  std::array<int64_t, K> inner_stride;
  for (size_t k = 0; k < K; ++k) inner_stride[k] = (*strides[k])[last];
  Shape index(sizes.size(), 0);
  for (int64_t outer = 0; outer < n / sizes[last]; ++outer) {
    std::array<int64_t, K> offsets = base;
    for (int64_t i = 0; i < sizes[last]; ++i) {
      fn(offsets);
      for (size_t k = 0; k < K; ++k) offsets[k] += inner_stride[k];
    }
    for (size_t d = last; d-- > 0;) {  // odometer over the outer dims
      for (size_t k = 0; k < K; ++k) base[k] += (*strides[k])[d];
      if (++index[d] < sizes[d]) break;
      for (size_t k = 0; k < K; ++k) base[k] -= (*strides[k])[d] * sizes[d];
      index[d] = 0;
    }
  }
}

// True when every operand has out's strides and they cover one dense block
// (any dim order: NCHW, channels-last, ...): then element i of each operand
// is at the same offset, and the ops run as flat loops over [0, numel).
template <size_t K>
bool same_dense_layout(const Strided& out, const std::array<const Strided*, K>& in) {
  for (const Strided* s : in) {
    if (s->strides != out.strides) return false;
  }
  Shape order(out.dim());
  for (int64_t d = 0; d < out.dim(); ++d) order[d] = d;
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return out.strides[a] < out.strides[b]; });
  int64_t expected = 1;
  for (int64_t d : order) {
    if (out.sizes[d] == 1) continue;
    if (out.strides[d] != expected) return false;
    expected *= out.sizes[d];
  }
  return true;
}

// Elements per parallel chunk of a flat loop: big enough that a chunk costs far
// more than handing it to a thread.
inline constexpr int64_t kFlatGrain = 1 << 15;

// fn(begin, end) over [0, n) in parallel chunks.
template <class Fn>
void flat_loop(int64_t n, Fn&& fn) {
  parallel_for(0, n, kFlatGrain, fn);
}

// Calls fn(offsets, len) for runs of `len` consecutive indices that are
// contiguous (stride 1) in every operand, covering `sizes` in row-major order:
// trailing dims merge into one run while every operand steps over them densely.
// Where an operand's last stride is not 1, every run is one element long.
template <size_t K, class Fn>
void for_each_run(const Shape& sizes, const std::array<const Shape*, K>& strides, Fn&& fn) {
  size_t outer = sizes.size();
  int64_t len = 1;
  auto dense_at = [&](size_t d) {  // dim d steps over the run of the dims after it
    for (size_t k = 0; k < K; ++k) {
      if ((*strides[k])[d] != len) return false;
    }
    return true;
  };
  while (outer > 0 && dense_at(outer - 1)) len *= sizes[--outer];
  if (len == 1) outer = sizes.size();
  const Shape outer_sizes(sizes.begin(), sizes.begin() + outer);
  std::array<Shape, K> outer_strides;
  std::array<const Shape*, K> outer_stride_ptrs;
  for (size_t k = 0; k < K; ++k) {
    outer_strides[k].assign(strides[k]->begin(), strides[k]->begin() + outer);
    outer_stride_ptrs[k] = &outer_strides[k];
  }
  if (numel_of(sizes) == 0) return;
  for_each_offset<K>(outer_sizes, outer_stride_ptrs, [&](const auto& o) { fn(o, len); });
}

}  // namespace loom::cpu
