// File: core/ops/conv_internal.cc
// The device dispatch of the conv kernels, shared by conv2d and the fused conv
// ops (conv_internal.h).
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include "core/ops/conv_internal.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/bias.h"
#include "core/cuda/elementwise.h"
#include "core/cuda/reduce.h"
#include "core/cudnn/conv.h"
#include "core/ops/conv_small_internal.h"
#endif

namespace loom::conv_detail {

namespace {

// Dense in both layouts (one channel, or 1x1 spatial): says nothing about layout.
bool layout_neutral(const Tensor& t) {
  return t.is_contiguous(MemoryFormat::Contiguous) && t.is_contiguous(MemoryFormat::ChannelsLast);
}

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

}  // namespace

cpu::ConvParams conv_params(const Conv2dOptions& o) {
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
  return x.device().is_cuda() ? output : MemoryFormat::Contiguous;
}

Tensor kernel_input(const Tensor& t, MemoryFormat format) {
  return t.defined() ? t.detach().contiguous(format) : Tensor();
}

void forward_kernel(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const cpu::ConvParams& p) {
  if (y.device().is_cuda()) {
#ifdef LOOM_WITH_CUDA
    DeviceGuard guard(y.device());
    if (!small_conv_forward(y, x, w, p)) cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), p);
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
    DeviceGuard guard(dx.device());
    if (!small_conv_dgrad(dx, dy, w, p)) cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p);
#endif
    return;
  }
  cpu::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p);
}

void wgrad_kernel(const Tensor& dw, const Tensor& dy, const Tensor& x, const cpu::ConvParams& p) {
  if (dw.device().is_cuda()) {
#ifdef LOOM_WITH_CUDA
    DeviceGuard guard(dw.device());
    if (!small_conv_wgrad(dw, dy, x, p)) cudnn::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), p);
#endif
    return;
  }
  cpu::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), p);
}

void bgrad_kernel(const Tensor& db, const Tensor& dy) {
  if (db.device().is_cuda()) {
#ifdef LOOM_WITH_CUDA
    DeviceGuard guard(db.device());
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

void weight_grads_kernel(const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                         const cpu::ConvParams& p) {
#ifdef LOOM_WITH_CUDA
  if (dw.defined() && db.defined() && small_conv_wgrad(dw, dy, x, p, db)) return;
#endif
  if (dw.defined()) wgrad_kernel(dw, dy, x, p);
  if (db.defined()) bgrad_kernel(db, dy);
}

}  // namespace loom::conv_detail
