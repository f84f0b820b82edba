// File: core/cuda/compare_kernels.h
// Launchers for the kernels in compare.cu (semantics of core/cpu/compare.h).
// They return the launch status; core/cuda/compare.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/compare.h"
#include "core/strided.h"

namespace loom::cuda {

cudaError_t launch_compare(const Strided& out, const Strided& a, const Strided& b,
                           kernel::CompareOp op, cudaStream_t stream);
cudaError_t launch_compare_scalar(const Strided& out, const Strided& a, double scalar,
                                  kernel::CompareOp op, cudaStream_t stream);
cudaError_t launch_isclose(const Strided& out, const Strided& a, const Strided& b, double rtol,
                           double atol, bool equal_nan, cudaStream_t stream);
cudaError_t launch_where(const Strided& out, const Strided& cond, const Strided& a,
                         const Strided& b, cudaStream_t stream);

}  // namespace loom::cuda
