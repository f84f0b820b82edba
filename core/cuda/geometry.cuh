// File: core/cuda/geometry.cuh
// Device helpers the .cu files share: strided geometry (a row-major linear index
// to an element offset, so any layout works, NCHW or NHWC alike), launch shapes
// for grid-stride loops, and warp- and block-wide reductions.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/cuda/copy_kernels.h"
#include "core/kernel/divider.h"
#include "core/strided.h"

namespace loom::cuda {

constexpr int kThreads = 256;      // threads per block; a power of two (block_reduce)
constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest
constexpr int kWarp = 32;               // threads per warp
constexpr unsigned kFullMask = 0xffffffffu;  // every lane of a warp

// Sizes and strides of one operand, passed to kernels by value. Size-1 dims are
// dropped and dims that are contiguous with each other merged, so a dense operand
// becomes one dim and costs no division in offset_of. An operand of fewer than
// 2^31 elements (`narrow`) carries a divider per dim, so that offset_of divides
// in 32 bits (core/kernel/divider.h).
struct Geometry {
  int ndim;
  bool narrow;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  kernel::math::Divider dividers[kMaxDims];
};

// The dividers of a geometry whose dims are final, when its elements can be
// numbered in 31 bits (an empty operand is never indexed and gets none).
inline void set_dividers(Geometry& g) {
  int64_t numel = 1;
  for (int d = 0; d < g.ndim; ++d) numel *= g.sizes[d];
  g.narrow = numel > 0 && numel < kernel::math::kNarrowIndexLimit;
  if (!g.narrow) return;
  for (int d = 0; d < g.ndim; ++d) g.dividers[d] = kernel::math::divider_for(g.sizes[d]);
}

// sizes and strides may have at most kMaxDims entries (the host wrappers check).
inline Geometry geometry_of(const Shape& sizes, const Shape& strides) {
  Geometry g{0, false, {}, {}, {}};
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    // Dim d merges into the previous dim p when t_p == t_d * s_d: index i of the
    // merged dim then lands at (i / s_d) * t_p + (i % s_d) * t_d = i * t_d.
    if (g.ndim > 0 && g.strides[g.ndim - 1] == strides[d] * sizes[d]) {
      g.sizes[g.ndim - 1] *= sizes[d];
      g.strides[g.ndim - 1] = strides[d];
    } else {
      g.sizes[g.ndim] = sizes[d];
      g.strides[g.ndim] = strides[d];
      ++g.ndim;
    }
  }
  set_dividers(g);
  return g;
}

inline Geometry geometry_of(const Strided& t) { return geometry_of(t.sizes, t.strides); }

// The dims of `lead` from its largest stride to its smallest (ties keep their
// order): the order in which an elementwise kernel should walk its operands.
// Walked in row-major order, a channels-last tensor puts neighbouring threads C
// elements apart; walked in memory order it is one dense dim. An elementwise
// op's result does not depend on the order, as long as every operand follows it.
inline std::vector<size_t> memory_order(const Strided& lead) {
  std::vector<size_t> order(lead.sizes.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lead.strides[a] > lead.strides[b]; });
  return order;
}

// t's geometry with its dims taken in `order` (memory_order of the operand that leads).
inline Geometry geometry_in(const Strided& t, const std::vector<size_t>& order) {
  Shape sizes, strides;
  for (size_t d : order) {
    sizes.push_back(t.sizes[d]);
    strides.push_back(t.strides[d]);
  }
  return geometry_of(sizes, strides);
}

// `g` (an operand's geometry, in the walk's order) moved `v` elements at a time:
// true when its innermost dim has unit stride and a whole number of packs, its
// other strides are whole packs and `data` is aligned to a pack (v elements of
// `element_bytes`). Then *packed walks the packs in the same order: its index p
// stands for the walk's elements [p v, p v + v), and offset_of(p, *packed) is
// their offset in packs. Every operand of a walk must fit for it to go by packs.
inline bool packed_geometry(const Geometry& g, const void* data, int64_t v, int64_t element_bytes,
                            Geometry* packed) {
  if (g.ndim == 0 || g.strides[g.ndim - 1] != 1 || g.sizes[g.ndim - 1] % v != 0 ||
      reinterpret_cast<uintptr_t>(data) % (v * element_bytes) != 0) {
    return false;
  }
  for (int d = 0; d + 1 < g.ndim; ++d) {
    if (g.strides[d] % v != 0) return false;
  }
  *packed = g;
  packed->sizes[g.ndim - 1] /= v;
  for (int d = 0; d + 1 < g.ndim; ++d) packed->strides[d] /= v;
  set_dividers(*packed);
  return true;
}

// Element offset of row-major index `linear` (< numel). The outermost dim needs
// no modulo because linear is in range.
__device__ inline int64_t offset_of(int64_t linear, const Geometry& g) {
  int64_t offset = 0;
  for (int d = g.ndim - 1; d > 0; --d) {
    const int64_t index = kernel::math::split_index(&linear, g.sizes[d], g.dividers[d], g.narrow);
    offset += index * g.strides[d];
  }
  return g.ndim > 0 ? offset + linear * g.strides[0] : 0;
}

// Multi-array kernels number the work items (chunks, tiles) of their arrays one
// after another: array a's first item is first_item(a), non-decreasing in a.
// The array that owns `item` is the last one whose first item is <= item (an
// empty array shares its first item with the next one and so is never chosen).
template <class FirstItem>
__device__ int owner_of(int count, int64_t item, const FirstItem& first_item) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_item(mid) <= item) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Grid-stride loops: for (i = first_index(); i < n; i += index_step()).
__device__ inline int64_t first_index() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ inline int64_t index_step() { return int64_t(gridDim.x) * blockDim.x; }

// a / b rounded up, for positive b: how many pieces of b cover a.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for one thread per item, and for one block per item.
inline int blocks_for(int64_t items) {
  return static_cast<int>(std::min(ceil_div(items, kThreads), kMaxBlocks));
}
inline int blocks_for_groups(int64_t groups) {
  return static_cast<int>(std::min(groups, kMaxBlocks));
}

// Combines one value per lane of a warp as a butterfly: every lane gets the
// result, combined in the same order on every run. All 32 lanes must call it.
template <class T, class Combine>
__device__ T warp_reduce(T value, Combine combine) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value = combine(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

template <class T>
__device__ T warp_sum(T value) {
  return warp_reduce(value, [](T a, T b) { return a + b; });
}

// Combines one value per thread of a kThreads block; every thread gets the
// result. All threads of the block must call it (it synchronizes). T must be
// trivially constructible (it lives in shared memory).
template <class T, class Combine>
__device__ T block_reduce(T value, Combine combine) {
  __shared__ T partial[kThreads];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partial[threadIdx.x] = combine(partial[threadIdx.x], partial[threadIdx.x + half]);
    }
    __syncthreads();
  }
  T result = partial[0];
  __syncthreads();  // the next call may overwrite partial[0] before every thread read it
  return result;
}

}  // namespace loom::cuda
