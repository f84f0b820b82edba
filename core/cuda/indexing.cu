// File: core/cuda/indexing.cu
// Gather, scatter and scatter-add along one dim at int64 indices, over strided
// operands (see core/cpu/indexing.h for the base-view convention). Gather and
// scatter move raw bits of the element's width; scatter-add accumulates with
// atomicAdd (int64 as unsigned long long: two's complement wraps the same).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/indexing_kernels.h"
#include "core/cuda/visit.cuh"

namespace loom::cuda {

namespace {

template <class U>
__global__ void gather_kernel(U* out, Geometry og, const U* in, Geometry ig, int64_t in_dim_stride,
                              const int64_t* index, Geometry xg, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    out[offset_of(i, og)] = in[offset_of(i, ig) + index[offset_of(i, xg)] * in_dim_stride];
  }
}

template <class S>
__device__ void atomic_add(S* target, S value) {
  atomicAdd(target, value);
}

__device__ void atomic_add(int64_t* target, int64_t value) {
  atomicAdd(reinterpret_cast<unsigned long long*>(target), static_cast<unsigned long long>(value));
}

template <class U>
__global__ void scatter_kernel(U* out, Geometry og, int64_t out_dim_stride, const int64_t* index,
                               Geometry xg, const U* src, Geometry sg, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    out[offset_of(i, og) + index[offset_of(i, xg)] * out_dim_stride] = src[offset_of(i, sg)];
  }
}

template <class S>
__global__ void scatter_add_kernel(S* out, Geometry og, int64_t out_dim_stride,
                                   const int64_t* index, Geometry xg, const S* src, Geometry sg,
                                   int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    atomic_add(out + offset_of(i, og) + index[offset_of(i, xg)] * out_dim_stride,
               src[offset_of(i, sg)]);
  }
}

// scatter_add over lines sorted by target: index and src dense (outer, K, inner)
// with dim the K one, each line's index sorted stably. The first element of each
// run of one target adds the run's values to it one after the other, in the
// line's order, rounding to S after each add as the CPU's loop does: no atomics,
// so the same bits every run, and the CPU's bits.
template <class S>
__global__ void scatter_add_runs_kernel(S* out, Geometry og, int64_t out_dim_stride, const int64_t* index,
                                        const S* src, int64_t K, int64_t inner, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const int64_t k = i / inner % K, target = index[i];
    if (k > 0 && index[i - inner] == target) continue;  // not its run's first element
    S* to = out + offset_of(i, og) + target * out_dim_stride;
    S value = *to;
    for (int64_t at = i, m = k; m < K && index[at] == target; at += inner, ++m) {
      value = from_compute<S>(to_compute(value) + to_compute(src[at]));
    }
    *to = value;
  }
}

}  // namespace

cudaError_t launch_gather(const Strided& out, const Strided& in_base, int64_t in_dim_stride,
                          const Strided& index, cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  visit_width(out.dtype, [&]<class U>() {
    gather_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        out.ptr<U>(), geometry_of(out), in_base.ptr<const U>(), geometry_of(in_base),
        in_dim_stride, index.ptr<const int64_t>(), geometry_of(index), n);
  });
  return cudaGetLastError();
}

cudaError_t launch_scatter_add(const Strided& out_base, int64_t out_dim_stride,
                               const Strided& index, const Strided& src, cudaStream_t stream) {
  const int64_t n = src.numel();
  if (n == 0) return cudaSuccess;
  auto launch = [&]<class S>() {
    scatter_add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        out_base.ptr<S>(), geometry_of(out_base), out_dim_stride, index.ptr<const int64_t>(),
        geometry_of(index), src.ptr<const S>(), geometry_of(src), n);
  };
  switch (src.dtype) {
    case DType::Int32: launch.template operator()<int32_t>(); break;
    case DType::Int64: launch.template operator()<int64_t>(); break;
    case DType::UInt8:
    case DType::Bool: return cudaErrorInvalidValue;  // no 8-bit atomicAdd; the ops refuse these first
    default: visit_floating(src.dtype, launch);
  }
  return cudaGetLastError();
}

cudaError_t launch_scatter_add_sorted(const Strided& out_base, int64_t out_dim_stride, int64_t dim,
                                      const Strided& index, const Strided& src, cudaStream_t stream) {
  const int64_t n = src.numel();
  if (n == 0) return cudaSuccess;
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < src.sizes.size(); ++d) inner *= src.sizes[d];
  visit_floating(src.dtype, [&]<class S>() {
    scatter_add_runs_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        out_base.ptr<S>(), geometry_of(out_base), out_dim_stride, index.ptr<const int64_t>(), src.ptr<const S>(),
        src.sizes[dim], inner, n);
  });
  return cudaGetLastError();
}

cudaError_t launch_scatter(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
                           const Strided& src, cudaStream_t stream) {
  const int64_t n = src.numel();
  if (n == 0) return cudaSuccess;
  visit_width(src.dtype, [&]<class U>() {
    scatter_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        out_base.ptr<U>(), geometry_of(out_base), out_dim_stride, index.ptr<const int64_t>(),
        geometry_of(index), src.ptr<const U>(), geometry_of(src), n);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
