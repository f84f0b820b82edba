// File: core/cuda/reduce.cu
// Reductions. The input's dims split into kept ones (one output element per
// index) and reduced ones (the `extent` elements an output combines). A small
// extent gets one thread per output. A larger one is read coalesced: where
// neighbouring outputs are nearer in memory than neighbouring reduced elements
// (a channels-last bias gradient: C outputs, N*H*W apart each), a block covers
// kColumnWidth outputs with kColumnRows threads each ("columns"); otherwise a
// block covers one output, each thread folding every kThreads-th element.
// Where those blocks would be too few for the GPU (16 channels of a 128x64x64
// image), the extent is cut into slices, one block row each, whose partials a
// second kernel merges in slice order: the order is fixed by the shapes, so
// equal inputs give the same bits on every run.
// What is folded and stored is a policy: plain Sum/Mean/Max/Min/Prod, or the
// (value, index) pairs of max_along. bfloat16 and float16 inputs are read into
// float32 and accumulate there (element.cuh); only the result is rounded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/reduce_kernels.h"

namespace loom::cuda {

namespace {

using kernel::ReduceOp;

// Up to this many elements per output one thread folds them alone: a block
// would leave most of its threads idle.
constexpr int64_t kSerialExtent = 64;
// The columns kernel's block: kColumnWidth outputs x kColumnRows threads each.
constexpr int kColumnWidth = 32, kColumnRows = kThreads / kColumnWidth;
// Slicing aims at this many blocks (a few per multiprocessor on an H100 or
// H200) and gives each slice at least kSliceExtent elements per output.
constexpr int64_t kTargetBlocks = 1024, kSliceExtent = 2048;
// The columns kernel folds an output's slice with kColumnRows threads, so a
// slice of kSliceExtent left each thread 256 elements: the 128 bias sums of a
// ViT MLP's (2176, 128) gradient ran on 4 blocks for about 44 us. Up to
// kFewSlices of its slices may be as short as kColumnFold elements a thread,
// few enough that the merge of the partials stays short.
constexpr int64_t kColumnFold = 8, kFewSlices = 64;
constexpr int64_t kMaxSlices = 65535;  // gridDim.y

// Output i combines the input elements at offset_of(i, kept) + offset_of(r, reduced)
// for r < extent.
struct InputSplit {
  Geometry kept, reduced;
  int64_t outputs, extent;
};

InputSplit split_input(const Strided& in, const std::vector<bool>& is_reduced) {
  Shape kept_sizes, kept_strides, reduced_sizes, reduced_strides;
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    (is_reduced[d] ? reduced_sizes : kept_sizes).push_back(in.sizes[d]);
    (is_reduced[d] ? reduced_strides : kept_strides).push_back(in.strides[d]);
  }
  return {geometry_of(kept_sizes, kept_strides), geometry_of(reduced_sizes, reduced_strides),
          numel_of(kept_sizes), numel_of(reduced_sizes)};
}

// How launch_split covers a split: the kernel, and how many slices the extent
// is cut into (1: the kernel stores the results itself).
struct SplitPlan {
  enum class Kernel { Serial, Columns, Block } kernel;
  int64_t blocks_x, slices, slice_extent;
};

bool kept_inner(const InputSplit& split) {
  return split.kept.ndim > 0 && split.reduced.ndim > 0 &&
         split.kept.strides[split.kept.ndim - 1] < split.reduced.strides[split.reduced.ndim - 1];
}

SplitPlan plan_split(const InputSplit& split) {
  if (split.extent <= kSerialExtent) return {SplitPlan::Kernel::Serial, blocks_for(split.outputs), 1, split.extent};
  const bool columns = kept_inner(split);
  const int64_t blocks_x = columns ? (split.outputs + kColumnWidth - 1) / kColumnWidth
                                   : blocks_for_groups(split.outputs);
  const int64_t wanted = (kTargetBlocks + blocks_x - 1) / blocks_x;
  int64_t most = split.extent / kSliceExtent;
  if (columns) most = std::max(most, std::min(kFewSlices, split.extent / (kColumnRows * kColumnFold)));
  const int64_t slices = std::clamp<int64_t>(std::min(wanted, most), 1, kMaxSlices);
  const int64_t slice_extent = (split.extent + slices - 1) / slices;
  return {columns ? SplitPlan::Kernel::Columns : SplitPlan::Kernel::Block, blocks_x,
          (split.extent + slice_extent - 1) / slice_extent, slice_extent};
}

// Every policy's accumulator fits a partial slot of this many bytes.
constexpr size_t kPartialBytes = 16;

size_t scratch_bytes(const InputSplit& split) {
  const SplitPlan plan = plan_split(split);
  return plan.slices > 1 ? static_cast<size_t>(plan.slices * split.outputs) * kPartialBytes : 0;
}

// ---- policies: init, add one element, merge two partials, store a result -------

// S is the storage type, T = compute_t<S> what is added and compared.
template <class S>
struct ReducePolicy {
  using T = compute_t<S>;
  using Acc = T;
  S* out;
  Geometry out_geometry;
  ReduceOp op;
  T identity;  // 0, -inf / +inf for Max / Min, 1 for Prod
  int64_t extent;

  __device__ T init() const { return identity; }
  __device__ T add(T acc, T value, int64_t) const { return merge(acc, value); }
  // NaN wins both ways: a NaN partial stays, a NaN element replaces.
  __device__ T merge(T acc, T value) const {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Mean: return acc + value;
      case ReduceOp::Max: return std::isnan(value) || value > acc ? value : acc;
      case ReduceOp::Min: return std::isnan(value) || value < acc ? value : acc;
      case ReduceOp::Prod: return acc * value;
    }
    return acc;
  }
  // A Mean over no elements is 0 / 0 = NaN, as on the CPU.
  __device__ void store(int64_t i, T acc) const {
    out[offset_of(i, out_geometry)] = from_compute<S>(
        op == ReduceOp::Mean ? static_cast<T>(static_cast<double>(acc) / extent) : acc);
  }
};

template <class T>
struct ArgMax {
  T value;
  int64_t index;
};

// The first occurrence of the max, NaN counting as max. Merging in any order
// gives the CPU's sequential answer because ties go to the lower index.
template <class T>
__device__ ArgMax<T> better(const ArgMax<T>& a, const ArgMax<T>& b) {
  const bool a_nan = std::isnan(a.value), b_nan = std::isnan(b.value);
  if (a_nan != b_nan) return a_nan ? a : b;
  if (!a_nan && a.value != b.value) return a.value > b.value ? a : b;
  return a.index <= b.index ? a : b;
}

template <class S>
struct MaxAlongPolicy {
  using T = compute_t<S>;
  using Acc = ArgMax<T>;
  S* values;
  Geometry values_geometry;
  int64_t* indices;
  Geometry indices_geometry;
  ArgMax<T> identity;  // (-inf, largest index): loses to every element

  __device__ Acc init() const { return identity; }
  __device__ Acc add(const Acc& acc, T value, int64_t r) const { return better(acc, {value, r}); }
  __device__ Acc merge(const Acc& a, const Acc& b) const { return better(a, b); }
  __device__ void store(int64_t i, const Acc& acc) const {
    values[offset_of(i, values_geometry)] = from_compute<S>(acc.value);
    indices[offset_of(i, indices_geometry)] = acc.index;
  }
};

// ---- kernels -----------------------------------------------------------------------

// One thread per output element.
template <class S, class Policy>
__global__ void reduce_serial_kernel(const S* in, InputSplit split, Policy policy) {
  for (int64_t i = first_index(); i < split.outputs; i += index_step()) {
    const S* x = in + offset_of(i, split.kept);
    typename Policy::Acc acc = policy.init();
    for (int64_t r = 0; r < split.extent; ++r) {
      acc = policy.add(acc, to_compute(x[offset_of(r, split.reduced)]), r);
    }
    policy.store(i, acc);
  }
}

// One block per output element and slice (blockIdx.y) of the extent. The loop
// over outputs depends on blockIdx only, so every thread of a block reaches
// block_reduce's barriers together. With one slice the block stores its
// output; with more, its partial, which reduce_partials_kernel merges.
template <class S, class Policy>
__global__ void reduce_block_kernel(const S* in, InputSplit split, Policy policy,
                                    typename Policy::Acc* partials, int64_t slice_extent) {
  using Acc = typename Policy::Acc;
  const int64_t begin = blockIdx.y * slice_extent;
  const int64_t end = std::min(split.extent, begin + slice_extent);
  for (int64_t i = blockIdx.x; i < split.outputs; i += gridDim.x) {
    const S* x = in + offset_of(i, split.kept);
    Acc acc = policy.init();
    for (int64_t r = begin + threadIdx.x; r < end; r += kThreads) {
      acc = policy.add(acc, to_compute(x[offset_of(r, split.reduced)]), r);
    }
    acc = block_reduce(acc, [&](const Acc& a, const Acc& b) { return policy.merge(a, b); });
    if (threadIdx.x != 0) continue;
    if (gridDim.y == 1) {
      policy.store(i, acc);
    } else {
      partials[blockIdx.y * split.outputs + i] = acc;
    }
  }
}

// kColumnWidth neighbouring outputs (threadIdx.x) per block, kColumnRows
// threads (threadIdx.y) folding each one's slice (blockIdx.y) of the extent:
// a warp reads neighbouring outputs, which lie close in memory.
template <class S, class Policy>
__global__ void reduce_columns_kernel(const S* in, InputSplit split, Policy policy,
                                      typename Policy::Acc* partials, int64_t slice_extent) {
  using Acc = typename Policy::Acc;
  __shared__ Acc tile[kColumnRows][kColumnWidth];
  const int64_t i = blockIdx.x * int64_t{kColumnWidth} + threadIdx.x;
  const int64_t begin = blockIdx.y * slice_extent;
  const int64_t end = std::min(split.extent, begin + slice_extent);
  Acc acc = policy.init();
  if (i < split.outputs) {
    const S* x = in + offset_of(i, split.kept);
    for (int64_t r = begin + threadIdx.y; r < end; r += kColumnRows) {
      acc = policy.add(acc, to_compute(x[offset_of(r, split.reduced)]), r);
    }
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || i >= split.outputs) return;
  for (int k = 1; k < kColumnRows; ++k) acc = policy.merge(acc, tile[k][threadIdx.x]);
  if (gridDim.y == 1) {
    policy.store(i, acc);
  } else {
    partials[blockIdx.y * split.outputs + i] = acc;
  }
}

// Output i merges its slices' partials, in slice order.
template <class Policy>
__global__ void reduce_partials_kernel(const typename Policy::Acc* partials, int64_t outputs,
                                       int64_t slices, Policy policy) {
  for (int64_t i = first_index(); i < outputs; i += index_step()) {
    typename Policy::Acc acc = partials[i];
    for (int64_t s = 1; s < slices; ++s) acc = policy.merge(acc, partials[s * outputs + i]);
    policy.store(i, acc);
  }
}

// `scratch` holds scratch_bytes(split) bytes (null when that is 0).
template <class S, class Policy>
cudaError_t launch_split(const S* in, const InputSplit& split, const Policy& policy, void* scratch,
                         cudaStream_t stream) {
  using Acc = typename Policy::Acc;
  static_assert(sizeof(Acc) <= kPartialBytes);
  if (split.outputs == 0) return cudaSuccess;
  const SplitPlan plan = plan_split(split);
  auto* partials = static_cast<Acc*>(scratch);
  const dim3 grid(static_cast<unsigned>(plan.blocks_x), static_cast<unsigned>(plan.slices));
  switch (plan.kernel) {
    case SplitPlan::Kernel::Serial:
      reduce_serial_kernel<<<grid, kThreads, 0, stream>>>(in, split, policy);
      return cudaGetLastError();
    case SplitPlan::Kernel::Columns:
      reduce_columns_kernel<<<grid, dim3(kColumnWidth, kColumnRows), 0, stream>>>(
          in, split, policy, partials, plan.slice_extent);
      break;
    case SplitPlan::Kernel::Block:
      reduce_block_kernel<<<grid, kThreads, 0, stream>>>(in, split, policy, partials, plan.slice_extent);
      break;
  }
  if (plan.slices > 1) {
    reduce_partials_kernel<<<blocks_for(split.outputs), kThreads, 0, stream>>>(partials, split.outputs,
                                                                              plan.slices, policy);
  }
  return cudaGetLastError();
}

template <class T>
T identity_of(ReduceOp op) {
  constexpr T kInf = std::numeric_limits<T>::infinity();
  return op == ReduceOp::Max ? -kInf : op == ReduceOp::Min ? kInf : op == ReduceOp::Prod ? T(1) : T(0);
}

// Each dy element adds into one dx element.
template <class S>
__global__ void scatter_add_kernel(S* dx, Geometry dx_geometry, int64_t dx_step, const S* dy,
                                   Geometry dy_geometry, const int64_t* indices,
                                   Geometry indices_geometry, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const int64_t index = indices[offset_of(i, indices_geometry)];
    S& target = dx[offset_of(i, dx_geometry) + index * dx_step];
    target = from_compute<S>(to_compute(target) + to_compute(dy[offset_of(i, dy_geometry)]));
  }
}

}  // namespace

namespace {

InputSplit reduce_split(const Strided& out, const Strided& in) {
  std::vector<bool> is_reduced(in.sizes.size());
  for (size_t d = 0; d < is_reduced.size(); ++d) is_reduced[d] = out.sizes[d] != in.sizes[d];
  return split_input(in, is_reduced);
}

InputSplit max_along_split(const Strided& in, int64_t dim) {
  std::vector<bool> is_reduced(in.sizes.size(), false);
  is_reduced[dim] = true;
  return split_input(in, is_reduced);
}

}  // namespace

size_t reduce_scratch_bytes(const Strided& out, const Strided& in) {
  return scratch_bytes(reduce_split(out, in));
}

cudaError_t launch_reduce(const Strided& out, const Strided& in, ReduceOp op, void* scratch,
                          cudaStream_t stream) {
  const InputSplit split = reduce_split(out, in);
  return visit_floating(in.dtype, [&]<class S>() {
    using T = compute_t<S>;
    const ReducePolicy<S> policy{out.ptr<S>(), geometry_of(out), op, identity_of<T>(op),
                                 split.extent};
    return launch_split(in.ptr<const S>(), split, policy, scratch, stream);
  });
}

size_t max_along_scratch_bytes(const Strided& in, int64_t dim) {
  return scratch_bytes(max_along_split(in, dim));
}

cudaError_t launch_max_along(const Strided& values, const Strided& indices, const Strided& in,
                             int64_t dim, void* scratch, cudaStream_t stream) {
  const InputSplit split = max_along_split(in, dim);
  return visit_floating(in.dtype, [&]<class S>() {
    using T = compute_t<S>;
    const MaxAlongPolicy<S> policy{
        values.ptr<S>(), geometry_of(values), indices.ptr<int64_t>(), geometry_of(indices),
        {-std::numeric_limits<T>::infinity(), std::numeric_limits<int64_t>::max()}};
    return launch_split(in.ptr<const S>(), split, policy, scratch, stream);
  });
}

// Distinct dy elements differ in some dim other than `dim` (dy has size 1 there),
// so they add into distinct dx elements: the += needs no atomics.
cudaError_t launch_scatter_add_along(const Strided& dx, const Strided& dy, const Strided& indices,
                                     int64_t dim, cudaStream_t stream) {
  const int64_t n = dy.numel();
  if (n == 0) return cudaSuccess;
  visit_floating(dx.dtype, [&]<class S>() {
    scatter_add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        dx.ptr<S>(), geometry_of(dy.sizes, dx.strides), dx.strides[dim], dy.ptr<const S>(),
        geometry_of(dy), indices.ptr<const int64_t>(), geometry_of(indices), n);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
