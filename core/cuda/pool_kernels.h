// File: core/cuda/pool_kernels.h
// Launchers for the 2-D pooling kernels in pool.cu: the semantics of
// core/cpu/pool.h on device views (4-D, any strides, float32 and float64, and
// bfloat16 and float16 computing in float32). They
// return the launch status; core/cuda/pool.cc checks it.
//
// N batch, C channels, H, W input plane, P, Q output plane.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/pool.h"
#include "core/strided.h"

namespace loom::cuda {

// y, indices (N, C, P, Q) from x (N, C, H, W): one thread per output.
cudaError_t launch_max_pool2d_forward(const Strided& y, const Strided& indices, const Strided& x,
                                      const kernel::Pool2dParams& params, cudaStream_t stream);
// dx (N, C, H, W) from dy, indices (N, C, P, Q), one thread per input element
// summing, in the CPU's order, the dy whose index is that element.
cudaError_t launch_max_pool2d_backward(const Strided& dx, const Strided& dy,
                                       const Strided& indices, const kernel::Pool2dParams& params,
                                       cudaStream_t stream);
// The same without the window geometry: zero dx, then atomicAdd each dy at its
// index (in no fixed order where windows overlap).
cudaError_t launch_max_pool2d_backward_scatter(const Strided& dx, const Strided& dy,
                                               const Strided& indices, cudaStream_t stream);

cudaError_t launch_avg_pool2d_forward(const Strided& y, const Strided& x,
                                      const kernel::Pool2dParams& params,
                                      cudaStream_t stream);
// One thread per input element, summing dy / divisor over the windows covering it.
cudaError_t launch_avg_pool2d_backward(const Strided& dx, const Strided& dy,
                                       const kernel::Pool2dParams& params,
                                       cudaStream_t stream);

}  // namespace loom::cuda
