// File: core/ops/conv.cc
// conv2d: argument checks, layout handling, and the forward / dgrad / wgrad /
// bias-grad kernel calls.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include "core/ops/conv.h"

#include <fmt/format.h>

#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cpu/conv.h"
#include "core/error.h"
#include "core/ops/conv_internal.h"
#include "core/ops/elementwise.h"
#include "core/trace.h"

namespace loom {

using conv_detail::check_conv2d_args;
using conv_detail::conv_attributes;
using conv_detail::conv_params;
using conv_detail::dgrad_kernel;
using conv_detail::forward_kernel;
using conv_detail::kernel_format;
using conv_detail::kernel_input;
using conv_detail::output_format;
using conv_detail::output_sizes;
using conv_detail::weight_grads_kernel;

namespace {

void check_options(const Conv2dOptions& o) {
  LOOM_CHECK(o.stride.h > 0 && o.stride.w > 0, ValueError,
             "[conv2d] stride must be positive, got {}", o.stride.str());
  LOOM_CHECK(o.dilation.h > 0 && o.dilation.w > 0, ValueError,
             "[conv2d] dilation must be positive, got {}", o.dilation.str());
  LOOM_CHECK(o.padding.h >= 0 && o.padding.w >= 0, ValueError,
             "[conv2d] padding must be non-negative, got {}", o.padding.str());
  LOOM_CHECK(o.groups > 0, ValueError, "[conv2d] groups must be positive, got {}", o.groups);
}

// x (N, C, H, W), w (K, C/groups, R, S)
void check_channels(const Tensor& x, const Tensor& w, int64_t groups) {
  LOOM_CHECK(x.dim() == 4, ShapeError,
             "[conv2d] expected a 4-D input (N, C, H, W), got shape {}; for a single image add "
             "the batch dim with unsqueeze(0)",
             shape_str(x.sizes()));
  LOOM_CHECK(w.dim() == 4 && w.size(2) > 0 && w.size(3) > 0, ShapeError,
             "[conv2d] expected a 4-D weight (K, C/groups, R, S) with a non-empty filter, got "
             "shape {}",
             shape_str(w.sizes()));
  LOOM_CHECK(x.size(1) % groups == 0, ShapeError,
             "[conv2d] groups={} must divide the input channels, but input {} has {}", groups,
             shape_str(x.sizes()), x.size(1));
  LOOM_CHECK(w.size(0) % groups == 0, ShapeError,
             "[conv2d] groups={} must divide the output channels, but weight {} has {}", groups,
             shape_str(w.sizes()), w.size(0));
  LOOM_CHECK(x.size(1) == w.size(1) * groups, ShapeError,
             "[conv2d] input has {} channels but weight expects {} (input {}, weight {}{})",
             x.size(1), w.size(1) * groups, shape_str(x.sizes()), shape_str(w.sizes()),
             groups == 1 ? "" : fmt::format(", {} per group x groups={}", w.size(1), groups));
}

}  // namespace

namespace conv_detail {

// y (N, K, P, Q)
Shape output_sizes(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  const int64_t p = cpu::conv_output_size(x.size(2), w.size(2), o.stride.h, o.padding.h,
                                          o.dilation.h);
  const int64_t q = cpu::conv_output_size(x.size(3), w.size(3), o.stride.w, o.padding.w,
                                          o.dilation.w);
  LOOM_CHECK(p > 0 && q > 0, ShapeError,
             "[conv2d] input {} with kernel {}x{}, padding {}, dilation {} gives an empty output "
             "({}x{}); use more padding, a smaller dilation or a larger input",
             shape_str(x.sizes()), w.size(2), w.size(3), o.padding.str(), o.dilation.str(), p, q);
  return {x.size(0), w.size(0), p, q};
}

void check_conv2d_args(const Tensor& x, const Tensor& w, const Tensor& bias,
                       const Conv2dOptions& o) {
  check_float_tensor(x, "conv2d", "input");
  check_float_tensor(w, "conv2d", "weight");
  check_same_dtype_device(x, w, "conv2d");
  check_options(o);
  check_channels(x, w, o.groups);
  if (!bias.defined()) return;
  check_float_tensor(bias, "conv2d", "bias");
  check_same_dtype_device(x, bias, "conv2d");
  LOOM_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), ShapeError,
             "[conv2d] bias must have shape ({},) to match the {} output channels of weight {}, "
             "got {}",
             w.size(0), w.size(0), shape_str(w.sizes()), shape_str(bias.sizes()));
}

}  // namespace conv_detail

// y = conv(x, w) + b
// dx = dgrad(dy, w), dw = wgrad(dy, x), db = sum of dy over N, P, Q
// Under autocast, CUDA operands are first cast to the autocast dtype; the casts'
// backward returns each gradient in its operand's own dtype.
Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              Conv2dOptions options) {
  trace::OpScope trace("conv2d");
  if (trace.substituting()) {  // fusion by tracing: this conv may head a fused chain
    if (auto y = trace.substitute({x_in, weight_in, bias_in}, conv_attributes(options))) return *y;
  }
  const Tensor x = autocast_operand(x_in), weight = autocast_operand(weight_in),
               bias = autocast_operand(bias_in);
  check_conv2d_args(x, weight, bias, options);
  kernel::ConvParams params = conv_params(options);
  MemoryFormat format = output_format(x, weight);
  MemoryFormat kernel = kernel_format(x, format);
  Tensor xk = kernel_input(x, kernel), wk = kernel_input(weight, kernel);
  Tensor bk = kernel_input(bias, MemoryFormat::Contiguous);
  TensorOptions y_options = x.options();
  y_options.memory_format = kernel;
  Tensor y = empty(output_sizes(x, weight, options), y_options);
  forward_kernel(y, xk, wk, bk, params);
  y = y.contiguous(format);

  if (needs_grad({x, weight, bias})) {
    bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    bool need_b = bias.defined() && bias.requires_grad();
    Tensor saved_x = need_w ? xk : Tensor(), saved_w = need_x ? wk : Tensor();
    Shape x_sizes = x.sizes(), w_sizes = weight.sizes();
    const MemoryFormat w_format = weight.suggest_memory_format();
    record("conv2d", {x, weight, bias}, y,
           [=](const Tensor& dy) -> std::vector<Tensor> {
             Tensor g = dy.contiguous(kernel);
             TensorOptions grad_options = dy.options();
             grad_options.memory_format = kernel;
             Tensor dx, dw, db;
             if (need_x) {
               dx = empty(x_sizes, grad_options);
               dgrad_kernel(dx, g, saved_w, params);
               dx = dx.contiguous(format);
             }
             if (need_w) dw = empty(w_sizes, grad_options);
             if (need_b) db = empty({w_sizes[0]}, dy.options());
             weight_grads_kernel(dw, db, g, saved_x, params);
             // dw as the weight, as PyTorch's grads follow their leaf
             if (need_w) dw = dw.contiguous(w_format);
             return {dx, dw, db};
           },
           {saved_x, saved_w});
  }
  if (trace.recording()) trace.record({x_in, weight_in, bias_in}, y, conv_attributes(options));
  return y;
}

namespace {

// conv1d's own checks, so that its errors speak of L and R rather than of the
// conv2d it runs: x (N, C, L), weight (K, C/groups, R).
void check_conv1d_args(const Tensor& x, const Tensor& w, const Conv1dOptions& o) {
  LOOM_CHECK(x.defined() && w.defined(), ValueError, "[conv1d] input and weight must be defined");
  LOOM_CHECK(x.dim() == 3, ShapeError,
             "[conv1d] expected a 3-D input (N, C, L) or one 2-D sample (C, L), got shape {}", shape_str(x.sizes()));
  LOOM_CHECK(w.dim() == 3 && w.size(2) > 0, ShapeError,
             "[conv1d] expected a 3-D weight (K, C/groups, R) with a non-empty filter, got shape {}",
             shape_str(w.sizes()));
  LOOM_CHECK(o.stride > 0 && o.dilation > 0 && o.padding >= 0 && o.groups > 0, ValueError,
             "[conv1d] stride, dilation and groups must be positive and padding non-negative, got stride {}, "
             "dilation {}, groups {}, padding {}",
             o.stride, o.dilation, o.groups, o.padding);
  LOOM_CHECK(x.size(1) % o.groups == 0 && w.size(0) % o.groups == 0 && x.size(1) == w.size(1) * o.groups,
             ShapeError,
             "[conv1d] input {} and weight {} do not match with groups={}: the input's channels must equal "
             "weight.size(1) * groups, and groups must divide the input and output channels",
             shape_str(x.sizes()), shape_str(w.sizes()), o.groups);
  const int64_t length = cpu::conv_output_size(x.size(2), w.size(2), o.stride, o.padding, o.dilation);
  LOOM_CHECK(length > 0, ShapeError,
             "[conv1d] input {} with a filter of {}, padding {} and dilation {} gives an empty output ({}); "
             "use more padding, a smaller dilation or a longer input",
             shape_str(x.sizes()), w.size(2), o.padding, o.dilation, length);
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv1dOptions options) {
  if (x.defined() && x.dim() == 2) return conv1d(x.unsqueeze(0), weight, bias, options).squeeze(0);
  check_conv1d_args(x, weight, options);
  const Tensor x4 = x.unsqueeze(2);
  const Tensor y = conv2d(x4, weight.unsqueeze(2), bias,
                          {.stride = Size2(1, options.stride),
                           .padding = Size2(0, options.padding),
                           .dilation = Size2(1, options.dilation),
                           .groups = options.groups})
                       .squeeze(2);
  // conv2d writes channels-last where x and weight are both layout-neutral (C
  // of 1 and a depthwise filter) on the GPU; a 1-D y is contiguous there, as torch's.
  return x4.suggest_memory_format() == MemoryFormat::ChannelsLast ? y : y.contiguous();
}

}  // namespace loom
