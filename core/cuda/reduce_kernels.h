// File: core/cuda/reduce_kernels.h
// Launchers for the kernels in reduce.cu (float32, float64, and bfloat16 and
// float16 accumulating in float32; any strides, at most kMaxDims dims; indices
// are int64). Semantics as core/cpu/reduce.h. They
// return the launch status; core/cuda/reduce.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/kernel/reduce.h"
#include "core/strided.h"

namespace loom::cuda {

// The scratch a launch needs (0 bytes: none, and scratch may be null): the
// partial results of an extent cut into slices (reduce.cu).
size_t reduce_scratch_bytes(const Strided& out, const Strided& in);
cudaError_t launch_reduce(const Strided& out, const Strided& in, kernel::ReduceOp op, void* scratch,
                          cudaStream_t stream);
// Needs in.sizes[dim] >= 1 (an empty dim has no max).
size_t max_along_scratch_bytes(const Strided& in, int64_t dim);
cudaError_t launch_max_along(const Strided& values, const Strided& indices, const Strided& in,
                             int64_t dim, void* scratch, cudaStream_t stream);
cudaError_t launch_scatter_add_along(const Strided& dx, const Strided& dy, const Strided& indices,
                                     int64_t dim, cudaStream_t stream);

}  // namespace loom::cuda
