// File: core/cuda/pool_window.cc
// Checked launches of the window-index max-pooling kernels on the current stream.
#include "core/cuda/pool_window.h"

#include "core/cuda/pool_window_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace loom::cuda {

bool max_pool2d_window_supported(const kernel::Pool2dParams& params) {
  return params.kernel_h * params.kernel_w <= 256;
}

void max_pool2d_window_forward(const Strided& y, const Strided& index, const Strided& x,
                               const kernel::Pool2dParams& params) {
  LOOM_CUDA_CHECK(launch_max_pool2d_window_forward(y, index, x, params, current_stream()));
}

void max_pool2d_window_backward(const Strided& dx, const Strided& dy, const Strided& index,
                                const kernel::Pool2dParams& params, const Strided* dy_addend) {
  LOOM_CHECK(dy_addend == nullptr || (dy_addend->sizes == dy.sizes && dy_addend->dtype == dy.dtype), ValueError,
             "[max_pool2d backward] the gradient to add is {} {}, the output gradient {} {}",
             shape_str(dy_addend ? dy_addend->sizes : Shape{}), dtype_name(dy_addend ? dy_addend->dtype : dy.dtype),
             shape_str(dy.sizes), dtype_name(dy.dtype));
  LOOM_CUDA_CHECK(launch_max_pool2d_window_backward(dx, dy, dy_addend, index, params, current_stream()));
}

}  // namespace loom::cuda
