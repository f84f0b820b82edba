// File: core/cuda/indexing_kernels.h
// Launchers for the kernels in indexing.cu (semantics of core/cpu/indexing.h).
// They return the launch status; core/cuda/indexing.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/strided.h"

namespace loom::cuda {

cudaError_t launch_gather(const Strided& out, const Strided& in_base, int64_t in_dim_stride,
                          const Strided& index, cudaStream_t stream);
// float32, float64, bfloat16, float16, int32 or int64 (atomicAdd in the storage
// type; integers wrap around); cudaErrorInvalidValue for uint8 and Bool.
cudaError_t launch_scatter_add(const Strided& out_base, int64_t out_dim_stride,
                               const Strided& index, const Strided& src, cudaStream_t stream);
// Floating dtypes; index and src contiguous, each line along dim sorted stably by index.
cudaError_t launch_scatter_add_sorted(const Strided& out_base, int64_t out_dim_stride, int64_t dim,
                                      const Strided& index, const Strided& src, cudaStream_t stream);
// Any dtype; of repeated indices, which write lands last is unspecified.
cudaError_t launch_scatter(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
                           const Strided& src, cudaStream_t stream);

}  // namespace loom::cuda
