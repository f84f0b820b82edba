// File: core/cuda/kernels.h
// Launchers for the kernels in copy.cu. They return the launch status; the
// runtime layer (runtime.cc) turns failures into loom::CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include "core/strided.h"

namespace loom::cuda {

// dst = convert(src), same sizes, any strides and dtypes (at most 8 dims).
cudaError_t launch_copy(const Strided& dst, const Strided& src, cudaStream_t stream);
cudaError_t launch_fill(const Strided& dst, double value, cudaStream_t stream);
// out = a + alpha * b, float32 or float64.
cudaError_t launch_add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha,
                              cudaStream_t stream);

constexpr int kMaxDims = 8;

}  // namespace loom::cuda
