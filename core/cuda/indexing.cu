// File: core/cuda/indexing.cu
// Gather and scatter-add along one dim at int64 indices, over strided
// operands (see core/cpu/indexing.h for the base-view convention). Gather moves
// raw bits of the element's width; scatter-add accumulates with atomicAdd.
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
__global__ void scatter_add_kernel(S* out, Geometry og, int64_t out_dim_stride,
                                   const int64_t* index, Geometry xg, const S* src, Geometry sg,
                                   int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    atomicAdd(out + offset_of(i, og) + index[offset_of(i, xg)] * out_dim_stride,
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
  visit_floating(src.dtype, [&]<class S>() {
    scatter_add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        out_base.ptr<S>(), geometry_of(out_base), out_dim_stride, index.ptr<const int64_t>(),
        geometry_of(index), src.ptr<const S>(), geometry_of(src), n);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
