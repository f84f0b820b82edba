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
