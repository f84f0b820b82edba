// File: core/ops/conv_internal.cc
// The device dispatch of the conv kernels, shared by conv2d and the fused conv
// ops (conv_internal.h).
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include "core/ops/conv_internal.h"

#include <optional>

#include "core/cpu/elementwise.h"
#include "core/cuda/bias.h"
#include "core/cuda/elementwise.h"
#include "core/cuda/reduce.h"
#include "core/cudnn/conv.h"
#include "core/onednn/conv.h"
#include "core/onednn/tier.h"
#include "core/ops/conv_small_internal.h"
#include "core/ops/dispatch.h"

namespace loom::conv_detail {

namespace {

// Dense in both layouts (one channel, or 1x1 spatial): says nothing about layout.
bool layout_neutral(const Tensor& t) {
  return t.is_contiguous(MemoryFormat::Contiguous) && t.is_contiguous(MemoryFormat::ChannelsLast);
}

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

// The reference kernels compute in NCHW. An operand in another layout (the
// oneDNN tier's, for a convolution it declined) goes through an NCHW copy.
Tensor nchw(const Tensor& t) { return t.defined() ? t.contiguous() : t; }

// out = computed, when the kernel wrote an NCHW stand-in for out.
void copy_back(const Tensor& out, const Tensor& computed) {
  if (computed.raw_data() != out.raw_data()) Tensor(out).copy_(computed);
}

// `bias` as the CPU kernels take it: a pointer that may be null.
const Strided* pointer_to(const std::optional<Strided>& v) { return v ? &*v : nullptr; }

}  // namespace

kernel::ConvParams conv_params(const Conv2dOptions& o) {
  return {.stride_h = o.stride.h,
          .stride_w = o.stride.w,
          .pad_h = o.padding.h,
          .pad_w = o.padding.w,
          .dilation_h = o.dilation.h,
          .dilation_w = o.dilation.w,
          .groups = o.groups};
}

std::vector<trace::Attribute> conv_attributes(const Conv2dOptions& o) {
  return {{"stride", std::vector<int64_t>{o.stride.h, o.stride.w}},
          {"padding", std::vector<int64_t>{o.padding.h, o.padding.w}},
          {"dilation", std::vector<int64_t>{o.dilation.h, o.dilation.w}},
          {"groups", o.groups}};
}

MemoryFormat output_format(const Tensor& x, const Tensor& w) {
  bool channels_last = x.suggest_memory_format() == MemoryFormat::ChannelsLast ||
                       w.suggest_memory_format() == MemoryFormat::ChannelsLast ||
                       (x.device().is_cuda() && layout_neutral(x) && layout_neutral(w));
  return channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

MemoryFormat kernel_format(const Tensor& x, MemoryFormat output) {
  return x.device().is_cuda() || onednn::takes(x.dtype()) ? output : MemoryFormat::Contiguous;
}

Tensor kernel_input(const Tensor& t, MemoryFormat format) {
  return t.defined() ? t.detach().contiguous(format) : Tensor();
}

namespace {

// An empty batch (or no input channels) sums over nothing: the result is zero
// (plus the bias), as in PyTorch, and no engine runs (cuDNN refuses zero-size
// dims).
bool sums_nothing(const Tensor& a, const Tensor& b) { return a.numel() == 0 || b.numel() == 0; }

void zero_filled(const Tensor& t) {
  if (t.defined() && t.numel() > 0) Tensor(t).zero_();
}

}  // namespace

void forward_kernel(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const kernel::ConvParams& p) {
  if (sums_nothing(x, w)) {
    zero_filled(y);
    if (bias.defined() && y.numel() > 0) add_bias_kernel(y, bias);
    return;
  }
  if (y.device().is_cuda()) {
    DeviceGuard guard(y.device());
    if (!small_conv_forward(y, x, w, p) && !depthwise_conv_forward(y, x, w, p) && !patch_conv_forward(y, x, w, p)) {
      cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), p);
    }
    if (bias.defined()) add_bias_cuda(y, bias);
    return;
  }
  cpu_forward_kernel(y, x, w, bias, p, /*relu=*/false);
}

void cpu_forward_kernel(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const kernel::ConvParams& p, bool relu) {
  const std::optional<Strided> b = strided_or_none(bias);
  if (onednn::conv2d_forward(y.strided(), x.strided(), w.strided(), pointer_to(b), p, relu)) return;
  const Tensor out = nchw(y);
  cpu::conv2d_forward(out.strided(), nchw(x).strided(), nchw(w).strided(), pointer_to(b), p, relu);
  copy_back(y, out);
}

void dgrad_kernel(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p) {
  if (sums_nothing(dy, w)) {
    zero_filled(dx);
    return;
  }
  if (dx.device().is_cuda()) {
    DeviceGuard guard(dx.device());
    if (!small_conv_dgrad(dx, dy, w, p) && !depthwise_conv_dgrad(dx, dy, w, p) && !patch_conv_dgrad(dx, dy, w, p)) {
      cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p);
    }
    return;
  }
  if (onednn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p)) return;
  const Tensor out = nchw(dx);
  cpu::conv2d_dgrad(out.strided(), nchw(dy).strided(), nchw(w).strided(), p);
  copy_back(dx, out);
}

void wgrad_kernel(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p) {
  if (sums_nothing(dy, x)) {
    zero_filled(dw);
    return;
  }
  if (dw.device().is_cuda()) {
    DeviceGuard guard(dw.device());
    if (!small_conv_wgrad(dw, dy, x, p) && !depthwise_conv_wgrad(dw, dy, x, p) && !mma_conv_wgrad(dw, dy, x, p) &&
        !patch_conv_wgrad(dw, dy, x, p)) {
      cudnn::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), p);
    }
    return;
  }
  if (onednn::conv2d_wgrad(dw.strided(), nullptr, dy.strided(), x.strided(), p)) return;
  const Tensor out = nchw(dw);
  cpu::conv2d_wgrad(out.strided(), nchw(dy).strided(), nchw(x).strided(), p);
  copy_back(dw, out);
}

void add_bias_kernel(const Tensor& y, const Tensor& bias) {
  if (y.device().is_cuda()) {
    DeviceGuard guard(y.device());
    add_bias_cuda(y, bias);
    return;
  }
  const Tensor b = bias.detach().view({1, bias.size(0), 1, 1}).expand(y.sizes());
  cpu::add_scaled(y.strided(), y.strided(), b.strided(), 1.0);
}

void bgrad_kernel(const Tensor& db, const Tensor& dy) {
  if (dy.numel() == 0) {
    zero_filled(db);
    return;
  }
  if (db.device().is_cuda()) {
    DeviceGuard guard(db.device());
    if (cuda::is_channel_dense(dy.strided())) {
      cuda::channel_sum(db.strided(), dy.strided());
    } else {
      cuda::reduce(db.view({1, db.size(0), 1, 1}).strided(), dy.strided(), kernel::ReduceOp::Sum);
    }
    return;
  }
  cpu::conv2d_bgrad(db.strided(), nchw(dy).strided());
}

void weight_grads_kernel(const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                         const kernel::ConvParams& p) {
  if (dy.numel() == 0) {  // an empty batch: zero gradients (sums_nothing)
    zero_filled(dw);
    zero_filled(db);
    return;
  }
  if (dw.defined() && db.defined() && small_conv_wgrad(dw, dy, x, p, db)) return;
  if (dw.defined() && !dw.device().is_cuda()) {
    const std::optional<Strided> bias_grad = strided_or_none(db);
    if (onednn::conv2d_wgrad(dw.strided(), pointer_to(bias_grad), dy.strided(), x.strided(), p)) return;
  }
  if (dw.defined()) wgrad_kernel(dw, dy, x, p);
  if (db.defined()) bgrad_kernel(db, dy);
}

}  // namespace loom::conv_detail
