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
#include "core/ops/elementwise.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/bias.h"
#include "core/cuda/elementwise.h"
#include "core/cuda/reduce.h"
#include "core/cudnn/conv.h"
#endif

namespace loom {
namespace {

// "1" when both dims agree, else "(1, 2)": a pair the way a user writes it.
std::string pair_str(const std::array<int64_t, 2>& pair) {
  return pair[0] == pair[1] ? fmt::format("{}", pair[0])
                            : fmt::format("({}, {})", pair[0], pair[1]);
}

void check_options(const Conv2dOptions& o) {
  LOOM_CHECK(o.stride[0] > 0 && o.stride[1] > 0, ValueError,
             "[conv2d] stride must be positive, got {}", pair_str(o.stride));
  LOOM_CHECK(o.dilation[0] > 0 && o.dilation[1] > 0, ValueError,
             "[conv2d] dilation must be positive, got {}", pair_str(o.dilation));
  LOOM_CHECK(o.padding[0] >= 0 && o.padding[1] >= 0, ValueError,
             "[conv2d] padding must be non-negative, got {}", pair_str(o.padding));
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

// y (N, K, P, Q)
Shape output_sizes(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  Shape y = {x.size(0), w.size(0), 0, 0};
  for (int i = 0; i < 2; ++i) {
    y[2 + i] = cpu::conv_output_size(x.size(2 + i), w.size(2 + i), o.stride[i], o.padding[i],
                                     o.dilation[i]);
  }
  LOOM_CHECK(y[2] > 0 && y[3] > 0, ShapeError,
             "[conv2d] input {} with kernel {}x{}, padding {}, dilation {} gives an empty output "
             "({}x{}); use more padding, a smaller dilation or a larger input",
             shape_str(x.sizes()), w.size(2), w.size(3), pair_str(o.padding), pair_str(o.dilation),
             y[2], y[3]);
  return y;
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

cpu::ConvParams conv_params(const Conv2dOptions& o) {
  return {.stride_h = o.stride[0],
          .stride_w = o.stride[1],
          .pad_h = o.padding[0],
          .pad_w = o.padding[1],
          .dilation_h = o.dilation[0],
          .dilation_w = o.dilation[1],
          .groups = o.groups};
}

// Dense in both layouts (one channel, or 1x1 spatial): says nothing about layout.
bool layout_neutral(const Tensor& t) {
  return t.is_contiguous(MemoryFormat::Contiguous) && t.is_contiguous(MemoryFormat::ChannelsLast);
}

// PyTorch's CPU and cuDNN convolutions run channels-last when either operand
// suggests it, and return their results in that layout. When neither says
// (a one-channel image and its filter), the GPU picks channels-last, its native
// layout, so that the layers after the first conv stay NHWC.
MemoryFormat output_format(const Tensor& x, const Tensor& w) {
  bool channels_last = x.suggest_memory_format() == MemoryFormat::ChannelsLast ||
                       w.suggest_memory_format() == MemoryFormat::ChannelsLast ||
                       (x.device().is_cuda() && layout_neutral(x) && layout_neutral(w));
  return channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

// The layout the kernels compute in: the CPU reference wants NCHW; cuDNN takes
// either, so the GPU computes in the output's layout and saves two copies.
MemoryFormat kernel_format(const Tensor& x, MemoryFormat output) {
  return x.device().is_cuda() ? output : MemoryFormat::Contiguous;
}

// A kernel input in the kernel layout, detached (it feeds a kernel only, so it
// needs no graph node; without a copy it still shares storage with t).
Tensor kernel_input(const Tensor& t, MemoryFormat format) { return t.detach().contiguous(format); }

#ifdef LOOM_WITH_CUDA
// y (N, K, P, Q) += bias (K): the per-channel kernel on dense NCHW / NHWC y,
// the generic broadcast add otherwise.
void add_bias_cuda(const Tensor& y, const Tensor& bias) {
  if (cuda::is_channel_dense(y.strided())) {
    cuda::add_channel_bias(y.strided(), bias.strided());
    return;
  }
  Tensor b = bias.view({1, bias.size(0), 1, 1}).expand(y.sizes());
  cuda::add_scaled(y.strided(), y.strided(), b.strided(), 1.0);
}
#endif

// y (N, K, P, Q) = conv(x, w) + bias; every operand in the kernel layout.
void forward_kernel(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const cpu::ConvParams& p) {
  if (y.device().is_cuda()) {
#ifdef LOOM_WITH_CUDA
    cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), p);
    if (bias.defined()) add_bias_cuda(y, bias);
#endif
    return;
  }
  Strided bias_view = bias.defined() ? bias.strided() : Strided{};
  cpu::conv2d_forward(y.strided(), x.strided(), w.strided(), bias.defined() ? &bias_view : nullptr, p);
}

void dgrad_kernel(const Tensor& dx, const Tensor& dy, const Tensor& w, const cpu::ConvParams& p) {
  if (dx.device().is_cuda()) {
#ifdef LOOM_WITH_CUDA
    cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p);
#endif
    return;
  }
  cpu::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p);
}

void wgrad_kernel(const Tensor& dw, const Tensor& dy, const Tensor& x, const cpu::ConvParams& p) {
  if (dw.device().is_cuda()) {
#ifdef LOOM_WITH_CUDA
    cudnn::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), p);
#endif
    return;
  }
  cpu::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), p);
}

// db (K) = sum of dy (N, K, P, Q) over N, P and Q.
void bgrad_kernel(const Tensor& db, const Tensor& dy) {
  if (db.device().is_cuda()) {
#ifdef LOOM_WITH_CUDA
    if (cuda::is_channel_dense(dy.strided())) {
      cuda::channel_sum(db.strided(), dy.strided());
    } else {
      cuda::reduce(db.view({1, db.size(0), 1, 1}).strided(), dy.strided(), cpu::ReduceOp::Sum);
    }
#endif
    return;
  }
  cpu::conv2d_bgrad(db.strided(), dy.strided());
}

}  // namespace

// y = conv(x, w) + b
// dx = dgrad(dy, w), dw = wgrad(dy, x), db = sum of dy over N, P, Q
// Under autocast, CUDA operands are first cast to the autocast dtype; the casts'
// backward returns each gradient in its operand's own dtype.
Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              Conv2dOptions options) {
  const Tensor x = autocast_operand(x_in), weight = autocast_operand(weight_in),
               bias = autocast_operand(bias_in);
  check_conv2d_args(x, weight, bias, options);
  cpu::ConvParams params = conv_params(options);
  MemoryFormat format = output_format(x, weight);
  MemoryFormat kernel = kernel_format(x, format);
  Tensor xk = kernel_input(x, kernel), wk = kernel_input(weight, kernel);
  Tensor bk = bias.defined() ? bias.detach().contiguous() : Tensor();
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
             if (need_w) {
               dw = empty(w_sizes, grad_options);
               wgrad_kernel(dw, g, saved_x, params);
               dw = dw.contiguous(w_format);  // as the weight, as PyTorch's grads follow their leaf
             }
             if (need_b) {
               db = empty({w_sizes[0]}, dy.options());
               bgrad_kernel(db, g);
             }
             return {dx, dw, db};
           },
           {saved_x, saved_w});
  }
  return y;
}

}  // namespace loom
