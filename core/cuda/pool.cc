// File: core/cuda/pool.cc
// Checked launches of the pooling kernels (pool.cu) on the current stream.
#include "core/cuda/pool.h"

#include "core/cuda/pool_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void max_pool2d_forward(const Strided& y, const Strided& indices, const Strided& x,
                        const kernel::Pool2dParams& params) {
  LOOM_CUDA_CHECK(launch_max_pool2d_forward(y, indices, x, params, current_stream()));
}

void max_pool2d_backward(const Strided& dx, const Strided& dy, const Strided& indices,
                         const kernel::Pool2dParams& params) {
  LOOM_CUDA_CHECK(launch_max_pool2d_backward(dx, dy, indices, params, current_stream()));
}

void max_pool2d_backward(const Strided& dx, const Strided& dy, const Strided& indices) {
  LOOM_CUDA_CHECK(launch_max_pool2d_backward_scatter(dx, dy, indices, current_stream()));
}

void avg_pool2d_forward(const Strided& y, const Strided& x, const kernel::Pool2dParams& params) {
  LOOM_CUDA_CHECK(launch_avg_pool2d_forward(y, x, params, current_stream()));
}

void avg_pool2d_backward(const Strided& dx, const Strided& dy, const kernel::Pool2dParams& params) {
  LOOM_CUDA_CHECK(launch_avg_pool2d_backward(dx, dy, params, current_stream()));
}

}  // namespace loom::cuda
