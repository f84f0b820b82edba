// File: core/cuda/conv_depthwise.cc
// Checked launches of the depthwise convolution kernels on the current stream.
#include "core/cuda/conv_depthwise.h"

#include "core/cuda/conv_depthwise_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

// The operands' shapes agree with a depthwise convolution of x by w under p:
// y (or dy) has the output size the geometry gives.
bool output_fits(const Strided& x, const Strided& w, const Strided& y, const kernel::ConvParams& p) {
  const int64_t side = w.sizes[2];
  const int64_t P = (x.sizes[2] + 2 * p.pad_h - p.dilation_h * (side - 1) - 1) / p.stride_h + 1;
  const int64_t Q = (x.sizes[3] + 2 * p.pad_w - p.dilation_w * (side - 1) - 1) / p.stride_w + 1;
  return y.sizes.size() == 4 && y.dtype == x.dtype && y.sizes[0] == x.sizes[0] &&
         y.sizes[1] == x.sizes[1] && y.sizes[2] == P && y.sizes[3] == Q;
}

void check_operands(const char* op, const Strided& x, const Strided& w, const Strided& y,
                    const kernel::ConvParams& p) {
  LOOM_CHECK(conv_depthwise_supported(x, w, p) && output_fits(x, w, y, p), ValueError,
             "[{}] takes x (N, C, H, W), w (C, 1, K, K) with K 1, 3, 5 or 7, groups C and an "
             "output of the geometry's size, all of one floating dtype; got x {} {}, w {} {}, "
             "output {} {}, groups {}",
             op, shape_str(x.sizes), dtype_name(x.dtype), shape_str(w.sizes), dtype_name(w.dtype),
             shape_str(y.sizes), dtype_name(y.dtype), p.groups);
}

}  // namespace

bool conv_depthwise_supported(const Strided& x, const Strided& w, const kernel::ConvParams& p) {
  if (x.sizes.size() != 4 || w.sizes.size() != 4 || !is_floating(x.dtype) || w.dtype != x.dtype) {
    return false;
  }
  const int64_t C = x.sizes[1], side = w.sizes[2];
  return p.groups == C && w.sizes[0] == C && w.sizes[1] == 1 && w.sizes[3] == side &&
         (side == 1 || side == 3 || side == 5 || side == 7) && p.stride_h > 0 && p.stride_w > 0 &&
         p.dilation_h > 0 && p.dilation_w > 0;
}

void conv_depthwise_forward(const Strided& y, const Strided& x, const Strided& w,
                            const kernel::ConvParams& p) {
  check_operands("conv_depthwise_forward", x, w, y, p);
  LOOM_CUDA_CHECK(launch_conv_depthwise_forward(y, x, w, p, current_stream()));
}

void conv_depthwise_dgrad(const Strided& dx, const Strided& dy, const Strided& w,
                          const kernel::ConvParams& p) {
  check_operands("conv_depthwise_dgrad", dx, w, dy, p);
  LOOM_CUDA_CHECK(launch_conv_depthwise_dgrad(dx, dy, w, p, current_stream()));
}

Scratch conv_depthwise_wgrad_scratch(const Strided& dy, const Strided& dw) {
  const bool channels_innermost = dy.sizes[1] > 1 && dy.strides[1] == 1;
  const int64_t pixels = dy.sizes[0] * dy.sizes[2] * dy.sizes[3];
  const DepthwiseSplit split = depthwise_wgrad_split(dw.sizes[0], pixels, channels_innermost);
  return {.elements = std::max<int64_t>(1, split.chunks * dw.sizes[0] * dw.sizes[2] * dw.sizes[3]),
          .dtype = dw.dtype == DType::Float64 ? DType::Float64 : DType::Float32};
}

void conv_depthwise_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                          const kernel::ConvParams& p, const Strided& scratch) {
  check_operands("conv_depthwise_wgrad", x, dw, dy, p);
  check_scratch("conv_depthwise_wgrad", scratch, conv_depthwise_wgrad_scratch(dy, dw));
  LOOM_CUDA_CHECK(launch_conv_depthwise_wgrad(dw, dy, x, p, scratch, current_stream()));
}

}  // namespace loom::cuda
