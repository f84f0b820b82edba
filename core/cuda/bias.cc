// File: core/cuda/bias.cc
// Checked launches of the per-channel bias kernels on the current stream.
#include "core/cuda/bias.h"

#include "core/cuda/allocator.h"
#include "core/cuda/bias_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace loom::cuda {

namespace {

// The kernels index y as dense memory: anything else would read and write
// outside it, so this is checked even though ops only pass dense tensors.
void check_channel_dense(const Strided& t, const char* op) {
  LOOM_CHECK(is_channel_dense(t), ValueError,
             "[{}] expects a tensor of at least 2 dims, dense in NCHW or channels-last order; "
             "got sizes {} strides {} (make it .contiguous() first)",
             op, shape_str(t.sizes), shape_str(t.strides));
}

}  // namespace

bool is_channel_dense(const Strided& t) { return channel_layout(t).has_value(); }

void add_channel_bias(const Strided& y, const Strided& bias) {
  check_channel_dense(y, "add_channel_bias");
  LOOM_CUDA_CHECK(launch_add_channel_bias(y, bias, current_stream()));
}

void channel_sum(const Strided& db, const Strided& dy) {
  check_channel_dense(dy, "channel_sum");
  LOOM_CUDA_CHECK(launch_with_scratch(channel_sum_scratch_bytes(dy), [&](void* scratch) {
    return launch_channel_sum(db, dy, scratch, current_stream());
  }));
}

void relu_grad_sum(const Strided& g, const Strided& db, const Strided& dy, const Strided& y) {
  check_channel_dense(dy, "relu_grad_sum");
  for (const Strided* t : {&g, &y}) {
    LOOM_CHECK(t->sizes == dy.sizes && t->strides == dy.strides && t->dtype == dy.dtype, ValueError,
               "[relu_grad_sum] g and y must have dy's dtype, sizes and strides ({}, {}, {}); got "
               "{}, {}, {}",
               dtype_name(dy.dtype), shape_str(dy.sizes), shape_str(dy.strides), dtype_name(t->dtype),
               shape_str(t->sizes), shape_str(t->strides));
  }
  LOOM_CUDA_CHECK(launch_with_scratch(channel_sum_scratch_bytes(dy), [&](void* scratch) {
    return launch_relu_grad_sum(g, db, dy, y, scratch, current_stream());
  }));
}

}  // namespace loom::cuda
