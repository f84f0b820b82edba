// File: core/cuda/pool_window_kernels.h
// Launchers for the window-index max-pooling kernels in pool_window.cu (see
// pool_window.h for the index format). They return the launch status;
// core/cuda/pool_window.cc checks it.
//
// N batch, C channels, H, W input plane, P, Q output plane.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/pool.h"
#include "core/strided.h"

namespace loom::cuda {

// y (N, C, P, Q) and index (N, C, P, Q, uint8) from x (N, C, H, W).
cudaError_t launch_max_pool2d_window_forward(const Strided& y, const Strided& index,
                                             const Strided& x, const kernel::Pool2dParams& params,
                                             cudaStream_t stream);
// dx (N, C, H, W) overwritten from dy (+ dy_addend, where not null) and index (N, C, P, Q).
cudaError_t launch_max_pool2d_window_backward(const Strided& dx, const Strided& dy, const Strided* dy_addend,
                                              const Strided& index, const kernel::Pool2dParams& params,
                                              cudaStream_t stream);

}  // namespace loom::cuda
