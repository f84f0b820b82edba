// File: core/cuda/copy_kernels.h
// Launchers for the kernels in copy.cu. They return the launch status; the
// runtime layer (runtime.cc) turns failures into loom::CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include "core/strided.h"

namespace loom::cuda {

// dst = convert(src), same sizes, any strides and dtypes (at most 8 dims).
cudaError_t launch_copy(const Strided& dst, const Strided& src, cudaStream_t stream);
cudaError_t launch_fill(const Strided& dst, double value, cudaStream_t stream);
// dst[i] = start + i * step, converted to dtype, for the n elements of a dense array.
cudaError_t launch_arange(void* dst, DType dtype, int64_t n, double start, double step, cudaStream_t stream);

// One dense array of a batched conversion: dst[i] = convert(src[i]) for i < numel.
struct DenseSpan {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t numel = 0;
};

// Spans one launch converts: their pointers travel in the kernel's arguments.
constexpr int kMaxSpansPerLaunch = 64;

// Converts every span from src_dtype to dst_dtype (floating dtypes; the rounding
// of launch_copy) in one launch; count <= kMaxSpansPerLaunch.
cudaError_t launch_convert_spans(const DenseSpan* spans, int count, DType dst_dtype,
                                 DType src_dtype, cudaStream_t stream);

// Copies every span's bytes, whatever dtypes they hold (numel counts bytes
// here), in one launch; count <= kMaxSpansPerLaunch.
cudaError_t launch_copy_spans(const DenseSpan* spans, int count, cudaStream_t stream);

// Every CUDA kernel takes operands of at most this many dims.
constexpr int kMaxDims = 8;

}  // namespace loom::cuda
