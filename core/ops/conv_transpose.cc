// File: core/ops/conv_transpose.cc
// conv_transpose2d over the convolution kernels of conv_internal.h.
//
// The transposed convolution of x with w is the dgrad of a convolution whose
// input lives in y's space (N, K, P, Q) and whose output lives in x's space
// (N, C, H, W), with the same weight (C, K/groups, R, S) read as (out, in/groups):
//   y  = dgrad(x, w)
//   dx = conv(dy, w)                (the forward of that convolution)
//   dw = wgrad(x, dy)               (output gradient x, input dy)
//   db = sum of dy over N, P, Q     (per channel, bgrad_kernel)
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include "core/ops/conv_transpose.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/conv_internal.h"
#include "core/ops/elementwise.h"
#include "core/trace.h"

namespace loom {

using conv_detail::add_bias_kernel;
using conv_detail::bgrad_kernel;
using conv_detail::conv_params;
using conv_detail::dgrad_kernel;
using conv_detail::forward_kernel;
using conv_detail::kernel_format;
using conv_detail::kernel_input;
using conv_detail::output_format;
using conv_detail::wgrad_kernel;

namespace {

constexpr const char* kOp = "conv_transpose2d";

void check_options(const ConvTranspose2dOptions& o) {
  LOOM_CHECK(o.stride.h > 0 && o.stride.w > 0 && o.dilation.h > 0 && o.dilation.w > 0 &&
                 o.padding.h >= 0 && o.padding.w >= 0,
             ValueError,
             "[{}] stride and dilation must be positive and padding non-negative, got stride {}, "
             "dilation {}, padding {}",
             kOp, o.stride.pair_str(), o.dilation.pair_str(), o.padding.pair_str());
  const Size2 limit(std::max(o.stride.h, o.dilation.h), std::max(o.stride.w, o.dilation.w));
  LOOM_CHECK(o.output_padding.h >= 0 && o.output_padding.w >= 0 &&
                 o.output_padding.h < limit.h && o.output_padding.w < limit.w,
             ValueError,
             "[{}] output_padding {} must be smaller than the stride or the dilation (stride {}, "
             "dilation {}), as in PyTorch",
             kOp, o.output_padding.pair_str(), o.stride.pair_str(), o.dilation.pair_str());
  LOOM_CHECK(o.groups > 0, ValueError, "[{}] groups must be positive, got {}", kOp, o.groups);
}

// x (N, C, H, W), w (C, K/groups, R, S), bias (K)
void check_args(const Tensor& x, const Tensor& w, const Tensor& bias,
                const ConvTranspose2dOptions& o) {
  check_float_tensor(x, kOp, "input");
  check_float_tensor(w, kOp, "weight");
  check_same_dtype_device(x, w, kOp);
  check_options(o);
  LOOM_CHECK(x.dim() == 4, ShapeError,
             "[{}] expected a 4-D input (N, C, H, W), got shape {}; for a single image add the "
             "batch dim with unsqueeze(0)",
             kOp, shape_str(x.sizes()));
  LOOM_CHECK(w.dim() == 4 && w.size(2) > 0 && w.size(3) > 0, ShapeError,
             "[{}] expected a 4-D weight (C, K/groups, R, S), got shape {}", kOp,
             shape_str(w.sizes()));
  LOOM_CHECK(x.size(1) == w.size(0) && w.size(0) % o.groups == 0, ShapeError,
             "[{}] input has {} channels but weight {} expects {} (its first dim), which groups={} "
             "must divide",
             kOp, x.size(1), shape_str(w.sizes()), w.size(0), o.groups);
  if (!bias.defined()) return;
  check_float_tensor(bias, kOp, "bias");
  check_same_dtype_device(x, bias, kOp);
  const int64_t k = w.size(1) * o.groups;
  LOOM_CHECK(bias.dim() == 1 && bias.size(0) == k, ShapeError,
             "[{}] bias must have shape ({},) for the {} output channels of weight {} x groups={}, "
             "got {}",
             kOp, k, k, shape_str(w.sizes()), o.groups, shape_str(bias.sizes()));
}

// P = (H - 1) stride - 2 padding + dilation (R - 1) + output_padding + 1
int64_t output_size(int64_t h, int64_t r, int64_t stride, int64_t padding, int64_t dilation,
                    int64_t output_padding) {
  return (h - 1) * stride - 2 * padding + dilation * (r - 1) + output_padding + 1;
}

// y (N, K, P, Q)
Shape output_sizes(const Tensor& x, const Tensor& w, const ConvTranspose2dOptions& o) {
  const Shape y = {x.size(0), w.size(1) * o.groups,
                   output_size(x.size(2), w.size(2), o.stride.h, o.padding.h, o.dilation.h,
                               o.output_padding.h),
                   output_size(x.size(3), w.size(3), o.stride.w, o.padding.w, o.dilation.w,
                               o.output_padding.w)};
  LOOM_CHECK(y[2] > 0 && y[3] > 0, ShapeError,
             "[{}] input {} with kernel {}x{} and padding {} gives an empty output ({}x{}); "
             "use less padding",
             kOp, shape_str(x.sizes()), w.size(2), w.size(3), o.padding.pair_str(), y[2], y[3]);
  return y;
}

Conv2dOptions as_conv(const ConvTranspose2dOptions& o) {
  return {.stride = o.stride, .padding = o.padding, .dilation = o.dilation, .groups = o.groups};
}

}  // namespace

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                        ConvTranspose2dOptions options) {
  trace::OpScope trace("conv_transpose2d");
  const Tensor x = autocast_operand(x_in), weight = autocast_operand(weight_in),
               bias = autocast_operand(bias_in);
  check_args(x, weight, bias, options);
  const kernel::ConvParams params = conv_params(as_conv(options));
  const MemoryFormat format = output_format(x, weight);
  const MemoryFormat kernel = kernel_format(x, format);
  const Tensor xk = kernel_input(x, kernel), wk = kernel_input(weight, kernel);
  TensorOptions y_options = x.options();
  y_options.memory_format = kernel;
  Tensor y = empty(output_sizes(x, weight, options), y_options);
  dgrad_kernel(y, xk, wk, params);
  // The bias joins the conv's node, as in conv2d: its gradient is then the
  // per-channel sum of dy, not the broadcast add's generic reduction.
  if (bias.defined()) add_bias_kernel(y, bias);
  y = y.contiguous(format);

  if (needs_grad({x, weight, bias})) {
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad();
    const Tensor saved_x = need_w ? xk : Tensor(), saved_w = need_x ? wk : Tensor();
    const Shape x_sizes = x.sizes(), w_sizes = weight.sizes();
    const int64_t out_channels = y.size(1);
    const MemoryFormat w_format = weight.suggest_memory_format();
    record(kOp, {x, weight, bias}, y,
           [=](const Tensor& dy) -> std::vector<Tensor> {
             const Tensor g = dy.contiguous(kernel);
             TensorOptions grad_options = dy.options();
             grad_options.memory_format = kernel;
             Tensor dx, dw, db;
             if (need_x) {
               dx = empty(x_sizes, grad_options);
               forward_kernel(dx, g, saved_w, Tensor(), params);
               dx = dx.contiguous(format);
             }
             if (need_w) {
               dw = empty(w_sizes, grad_options);
               wgrad_kernel(dw, saved_x, g, params);
               dw = dw.contiguous(w_format);
             }
             if (need_b) {
               db = empty({out_channels}, dy.options());
               bgrad_kernel(db, g);
             }
             return {dx, dw, db};
           },
           {saved_x, saved_w});
  }
  if (trace.recording()) {
    std::vector<trace::Attribute> attributes = conv_detail::conv_attributes(as_conv(options));
    attributes.push_back({"output_padding", std::vector<int64_t>{options.output_padding.h, options.output_padding.w}});
    trace.record({x_in, weight_in, bias_in}, y, std::move(attributes));
  }
  return y;
}

}  // namespace loom
