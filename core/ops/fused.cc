// File: core/ops/fused.cc
// Fused ops: argument checks, a forward whose layer + ReLU is one cuDNN graph on
// the GPU when an engine exists (else the unfused kernels), and an explicit
// backward beside each forward. The CPU runs the reference kernels.
//
// N batch, C channels, H, W input, K out channels, R, S filter, P, Q output;
// rows = the product of linear's leading dims, in, out its feature counts.
#include "core/ops/fused.h"

#include <fmt/format.h>

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cpu/activation.h"
#include "core/cpu/conv.h"
#include "core/cpu/norm.h"
#include "core/cuda/bias.h"
#include "core/cuda/elementwise.h"
#include "core/cudnn/fused.h"
#include "core/cudnn/norm.h"
#include "core/cudnn/variant_walk.h"
#include "core/error.h"
#include "core/onednn/norm.h"
#include "core/ops/activation.h"
#include "core/ops/activation_internal.h"
#include "core/ops/conv_internal.h"
#include "core/ops/conv_small_internal.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/fused_internal.h"
#include "core/ops/linalg.h"
#include "core/ops/linalg_internal.h"
#include "core/ops/norm_internal.h"
#include "core/ops/reduction.h"
#include "core/trace.h"

namespace loom {

namespace {

std::atomic<bool>& fusion_switch() {
  static std::atomic<bool> enabled{true};
  return enabled;
}

// Fused graphs are tried for GPU tensors while fusion is on.
bool try_fused(const Tensor& t) { return t.device().is_cuda() && fusion_enabled(); }

using cudnn::NormActivation;

// The fused ops' activation pieces run Loom's activation kernels on every
// device: they write in place (cuDNN's pointwise graphs are not asked to alias
// their operands), and on the CPU they match the activation op's own kernels.

// y = act(x); y may be x, a fresh kernel output that nothing else holds yet.
void loom_activation(const Tensor& y, const Tensor& x, const NormActivation& act = {}) {
  LOOM_KERNEL(y, activation_forward, y.strided(), x.strided(), act.kind, act.parameters);
}

// dx = dy * act'(r), where r is what the row's derivative reads (its input, or
// its output for ReLU, ReLU6 and Hardtanh); dx may be dy.
void loom_activation_grad_into(const Tensor& dx, const Tensor& dy, const Tensor& r, const NormActivation& act = {}) {
  LOOM_KERNEL(dx, activation_backward, dx.strided(), dy.strided(), r.strided(), act.kind, act.parameters);
}

// dy * act'(r) in a new tensor laid out as r.
Tensor loom_activation_grad(const Tensor& dy, const Tensor& r, const NormActivation& act = {}) {
  Tensor d = empty_like(r);
  loom_activation_grad_into(d, dy.contiguous(r.suggest_memory_format()), r, act);
  return d;
}

// g = loom_activation_grad(dy, y) (ReLU's) as (rows, C), and db = the sum of g over rows when
// need_b; on the GPU one pass writes both, where the separate kernels read g again.
std::pair<Tensor, Tensor> relu_grad_and_sum(const Tensor& dy_in, const Tensor& y_in, int64_t channels,
                                            bool need_b) {
  DeviceGuard guard(dy_in.device());
  if (need_b && dy_in.device().is_cuda() && dy_in.dtype() == y_in.dtype()) {
    const Tensor dy = dy_in.contiguous().reshape({-1, channels});
    const Tensor y = y_in.contiguous().reshape({-1, channels});
    Tensor g = empty_like(dy), db = empty({channels}, dy.options());
    cuda::relu_grad_sum(g.strided(), db.strided(), dy.strided(), y.strided());
    return {g, db};
  }
  Tensor g = loom_activation_grad(dy_in, y_in).reshape({-1, channels});
  return {g, need_b ? sum(g, {0}) : Tensor()};
}

}  // namespace

void set_fusion_enabled(bool enabled) { fusion_switch() = enabled; }
bool fusion_enabled() { return fusion_switch(); }

FusionGuard::FusionGuard(bool enabled) : previous_(fusion_enabled()) { set_fusion_enabled(enabled); }
FusionGuard::~FusionGuard() { set_fusion_enabled(previous_); }

// ---- convolution + ReLU ---------------------------------------------------------------

namespace {

// What forward and backward share: the kernel parameters and layouts, the sizes
// and which gradients are wanted.
struct ConvSetup {
  kernel::ConvParams params;
  MemoryFormat output = MemoryFormat::Contiguous;  // channels-last when x or w suggests it, as conv2d
  MemoryFormat kernel = MemoryFormat::Contiguous;  // NCHW on the CPU, the output's on the GPU
  MemoryFormat weight = MemoryFormat::Contiguous;  // the weight's own: its gradient's layout
  Shape x_sizes, w_sizes, y_sizes;
  bool need_x = false, need_w = false, need_b = false;
};

ConvSetup conv_setup(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  ConvSetup s;
  s.params = conv_detail::conv_params(o);
  s.x_sizes = x.sizes();
  s.weight = w.suggest_memory_format();
  s.w_sizes = w.sizes();
  s.y_sizes = conv_detail::output_sizes(x, w, o);
  s.output = conv_detail::output_format(x, w);
  s.kernel = conv_detail::kernel_format(x, s.output);
  s.need_x = x.requires_grad();
  s.need_w = w.requires_grad();
  s.need_b = b.defined() && b.requires_grad();
  return s;
}

Tensor empty_in(const Shape& sizes, const Tensor& like, MemoryFormat format) {
  TensorOptions options = like.options();
  options.memory_format = format;
  options.requires_grad = false;
  return empty(sizes, options);
}

// y = conv(x, w) + b, then relu when asked; every operand in the kernel layout.
// On the GPU the conv, the bias and the ReLU are one graph where cuDNN allows.
void conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                  const kernel::ConvParams& p, bool relu) {
  if (relu && try_fused(y) && x.numel() > 0 &&  // an empty batch runs no engine (forward_kernel)
      (conv_detail::small_conv_bias_relu_forward(y, x, w, b, p) ||
       cudnn::conv2d_bias_relu_forward(y.strided(), x.strided(), w.strided(), strided_or_none(b), p))) {
    return;
  }
  if (!y.device().is_cuda()) {  // the CPU kernels add the bias and apply the ReLU in the same pass
    conv_detail::cpu_forward_kernel(y, x, w, b, p, relu);
    return;
  }
  conv_detail::forward_kernel(y, x, w, b, p);
  if (relu) loom_activation(y, y);
}

// dx = dgrad(g, w) where r > 0, else 0: one graph on the GPU where cuDNN allows.
void dgrad_relu(const Tensor& dx, const Tensor& g, const Tensor& w, const Tensor& r,
                const kernel::ConvParams& p) {
  if (try_fused(dx) && g.numel() > 0 &&
      cudnn::conv2d_dgrad_relu(dx.strided(), g.strided(), w.strided(), r.strided(), p)) {
    return;
  }
  conv_detail::dgrad_kernel(dx, g, w, p);
  loom_activation_grad_into(dx, dx, r);
}

// dx, dw, db of y = conv(x, w) + b from g = dL/dy in the kernel layout. With
// relu_before, x is r = relu(input) and dx is the gradient w.r.t. the input.
std::vector<Tensor> conv_grads(const ConvSetup& s, const Tensor& g, const Tensor& x,
                               const Tensor& w, bool relu_before) {
  Tensor dx, dw, db;
  if (s.need_x) {
    dx = empty_in(s.x_sizes, g, s.kernel);
    if (relu_before) {
      dgrad_relu(dx, g, w, x, s.params);
    } else {
      conv_detail::dgrad_kernel(dx, g, w, s.params);
    }
    dx = dx.contiguous(s.output);
  }
  if (s.need_w) dw = empty_in(s.w_sizes, g, s.kernel);
  if (s.need_b) db = empty_in({s.w_sizes[0]}, g, MemoryFormat::Contiguous);
  conv_detail::weight_grads_kernel(dw, db, g, x, s.params);
  if (s.need_w) dw = dw.contiguous(s.weight);  // as the weight, as conv2d's
  return {dx, dw, db};
}

}  // namespace

// y = relu(conv(x, w) + b)
// g = dy where y > 0; dx = dgrad(g, w), dw = wgrad(g, x), db = sum of g over N, P, Q
// Under autocast, CUDA operands are cast to the autocast dtype first, as conv2d's.
Tensor conv2d_bias_relu(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                        Conv2dOptions options) {
  constexpr std::string_view kOp = "conv2d_bias_relu";
  trace::OpScope trace("conv2d_bias_relu");
  const Tensor x = autocast_operand(x_in), weight = autocast_operand(weight_in),
               bias = autocast_operand(bias_in);
  conv_detail::check_conv2d_args(x, weight, bias, options);
  ConvSetup s = conv_setup(x, weight, bias, options);
  Tensor xk = conv_detail::kernel_input(x, s.kernel);
  Tensor wk = conv_detail::kernel_input(weight, s.kernel);
  Tensor bk = conv_detail::kernel_input(bias, MemoryFormat::Contiguous);
  Tensor yk = empty_in(s.y_sizes, x, s.kernel);
  conv_forward(yk, xk, wk, bk, s.params, /*relu=*/true);
  Tensor y = yk.contiguous(s.output);
  if (needs_grad({x, weight, bias})) {
    Tensor saved_x = s.need_w ? xk : Tensor(), saved_w = s.need_x ? wk : Tensor();
    Tensor saved_y = yk.detach();
    record(std::string(kOp), {x, weight, bias}, y,
           [=](const Tensor& dy) { return conv_grads(s, loom_activation_grad(dy, saved_y), saved_x, saved_w, false); },
           {saved_x, saved_w, saved_y});
  }
  if (trace.recording()) trace.record({x_in, weight_in, bias_in}, y, conv_detail::conv_attributes(options));
  return y;
}

// y = conv(r, w) + b with r = relu(x)
// dx = dgrad(dy, w) where x > 0, dw = wgrad(dy, r), db = sum of dy over N, P, Q
// Under autocast, CUDA operands are cast to the autocast dtype first, as conv2d's.
Tensor relu_conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                   Conv2dOptions options) {
  constexpr std::string_view kOp = "relu_conv2d";
  trace::OpScope trace("relu_conv2d");
  const Tensor x = autocast_operand(x_in), weight = autocast_operand(weight_in),
               bias = autocast_operand(bias_in);
  conv_detail::check_conv2d_args(x, weight, bias, options);
  ConvSetup s = conv_setup(x, weight, bias, options);
  Tensor xk = conv_detail::kernel_input(x, s.kernel);
  Tensor wk = conv_detail::kernel_input(weight, s.kernel);
  Tensor bk = conv_detail::kernel_input(bias, MemoryFormat::Contiguous);
  Tensor r = empty_in(s.x_sizes, x, s.kernel);
  loom_activation(r, xk);
  Tensor yk = empty_in(s.y_sizes, x, s.kernel);
  conv_forward(yk, r, wk, bk, s.params, /*relu=*/false);
  Tensor y = yk.contiguous(s.output);
  if (needs_grad({x, weight, bias})) {
    Tensor saved_r = s.need_x || s.need_w ? r : Tensor(), saved_w = s.need_x ? wk : Tensor();
    record(std::string(kOp), {x, weight, bias}, y,
           [=](const Tensor& dy) {
             return conv_grads(s, dy.contiguous(s.kernel), saved_r, saved_w, /*relu_before=*/true);
           },
           {saved_r, saved_w});
  }
  if (trace.recording()) trace.record({x_in, weight_in, bias_in}, y, conv_detail::conv_attributes(options));
  return y;
}

// ---- batch norm + residual + activation ------------------------------------------------

namespace {

using norm_detail::channel_options;

constexpr std::string_view kBnOp = "batch_norm_activation";

bool is_relu(const NormActivation& act) { return act.kind == ActivationKind::Relu; }

void check_bn_act_args(std::string_view who, const Tensor& x, const Tensor& running_mean,
                       const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                       const BatchNormOptions& options, const Tensor& residual) {
  norm_detail::check_channel_norm_args(who, x, running_mean, running_var, weight, bias, options.training);
  if (!residual.defined()) return;
  check_float_tensor(residual, who, "residual");
  if (!is_half_precision(x.dtype()) && !is_half_precision(residual.dtype())) {
    check_same_dtype_device(x, residual, who);
  }
  LOOM_CHECK(residual.device() == x.device(), DeviceError,
             "[{}] input is on {} but residual is on {}; move it with .to(Device)", who, x.device().str(),
             residual.device().str());
  LOOM_CHECK(residual.sizes() == x.sizes(), ShapeError, "[{}] residual has shape {} but input has {}; they must match",
             who, shape_str(residual.sizes()), shape_str(x.sizes()));
}

// Detached, dense operands for the kernels; missing weight / bias / running
// statistics get stand-ins (1, 0, 0, 1) so one code path serves every case.
struct BnOperands {
  // z: the residual's values, dropped from the backward's copy where the row's
  // derivative reads y (a projection shortcut's output would otherwise live
  // until the backward for nothing); `residual` says whether the forward added one.
  Tensor x, z, weight, bias, running_mean, running_var;
  bool residual = false;
  Tensor save_mean, save_invstd;  // outputs of the forward, saved for the backward
  Tensor y;                       // act(bn(x) + z)
  // bn(x) + z, kept by an unfused forward for a row whose derivative reads its
  // input, as the one-by-one run keeps it (the fused graph keeps none); not
  // kept for the backward where the derivative can read y (ReLU6, Hardtanh).
  Tensor pre;
};

Tensor channel_operand(const Tensor& t, const Tensor& x, double stand_in) {
  return t.defined() ? t.detach().contiguous() : full({x.size(1)}, stand_in, channel_options(x));
}

BnOperands bn_operands(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, const Tensor& residual) {
  MemoryFormat format = x.suggest_memory_format();
  BnOperands o;
  o.x = x.detach().contiguous(format);
  o.z = residual.defined() ? residual.detach().contiguous(format) : Tensor();
  o.residual = residual.defined();
  o.weight = channel_operand(weight, o.x, 1.0);
  o.bias = channel_operand(bias, o.x, 0.0);
  o.running_mean = channel_operand(running_mean, o.x, 0.0);
  o.running_var = channel_operand(running_var, o.x, 1.0);
  o.save_mean = empty({x.size(1)}, channel_options(o.x));
  o.save_invstd = empty({x.size(1)}, channel_options(o.x));
  o.y = empty_like(o.x);
  return o;
}

bool saves_input(const NormActivation& act) {
  return kernel::activation_info(act.kind).saved == kernel::Saved::Input;
}

// Where an unfused forward's norm writes bn(x): y itself, which the activation
// then overwrites, or for a row that saves its input, o.pre.
const Tensor& norm_output(BnOperands& o, const NormActivation& act) {
  if (!saves_input(act)) return o.y;
  o.pre = empty_like(o.x);
  return o.pre;
}

// bn += z, then y = act(bn), on the activation op's tiers (so that the piece
// and the one-by-one run agree). An in-place activation on the GPU runs Loom's
// kernel, which also adds z in the same pass: cuDNN's pointwise graphs are not
// asked to alias their operands.
void finish_unfused(const BnOperands& o, const Tensor& bn, const NormActivation& act) {
  if (o.y.is_same(bn) && o.y.device().is_cuda()) {
    if (o.z.defined()) {
      LOOM_KERNEL(o.y, add_activation, o.y.strided(), o.y.strided(), o.z.strided(), act.kind, act.parameters);
      return;
    }
    loom_activation(o.y, o.y, act);
    return;
  }
  if (o.z.defined()) LOOM_KERNEL(bn, add_scaled, bn.strided(), bn.strided(), o.z.strided(), 1.0);
  activation_detail::forward_kernel(o.y, bn, act.kind, act.parameters);
}

// The fused graph on the GPU: y; false when it did not run.
bool bn_act_forward_fused(const BnOperands& o, const BatchNormOptions& options, const NormActivation& act) {
  DeviceGuard guard(o.x.device());
  if (!fusion_enabled()) return false;
  return cudnn::batch_norm_activation_forward_training(
      {.y = o.y.strided(), .save_mean = o.save_mean.strided(), .save_invstd = o.save_invstd.strided(),
       .x = o.x.strided(), .weight = o.weight.strided(), .bias = o.bias.strided(),
       .running_mean = o.running_mean.strided(), .running_var = o.running_var.strided(), .eps = options.eps,
       .momentum = options.momentum},
      act, strided_or_none(o.z));
}

// The CPU's oneDNN tier: bn and a ReLU in one primitive; otherwise bn, then
// the add and the activation. False where the tier does not take x.
bool bn_act_forward_onednn(BnOperands& o, const BatchNormOptions& options, const NormActivation& act) {
  if (!on_onednn_tier(o.x)) return false;
  const bool one_primitive = is_relu(act) && !o.z.defined();
  const Tensor& bn = one_primitive ? o.y : norm_output(o, act);
  if (!onednn::batch_norm_training_forward(
          bn.strided(), o.save_mean.strided(), o.save_invstd.strided(), o.x.strided(), o.weight.strided(),
          o.bias.strided(), options.eps,
          kernel::RunningStats{o.running_mean.strided(), o.running_var.strided(), options.momentum},
          /*relu=*/one_primitive)) {
    o.pre = Tensor();
    return false;
  }
  if (!one_primitive) finish_unfused(o, bn, act);
  return true;
}

// o.y = act(bn(o.x) + o.z) with batch statistics, blending the running ones;
// o.x is float32 / float64 (16-bit inputs that miss the fused graph take the
// composite of public ops instead).
void bn_act_forward(BnOperands& o, const BatchNormOptions& options, const NormActivation& act) {
  if (bn_act_forward_onednn(o, options, act)) return;
  const kernel::RunningStats running{o.running_mean.strided(), o.running_var.strided(), options.momentum};
  if (!o.x.device().is_cuda() && is_relu(act)) {  // normalize + residual + ReLU in one pass
    cpu::batch_norm_batch_stats(o.save_mean.strided(), o.save_invstd.strided(), o.x.strided(), options.eps,
                                running);
    cpu::batch_norm_relu_forward(o.y.strided(), o.x.strided(), o.save_mean.strided(), o.save_invstd.strided(),
                                 o.weight.strided(), o.bias.strided(), strided_or_none(o.z));
    return;
  }
  const Tensor& bn = norm_output(o, act);
  if (o.x.device().is_cuda()) {
    DeviceGuard guard(o.x.device());
    cudnn::batch_norm_forward_training(
        {.y = bn.strided(), .save_mean = o.save_mean.strided(), .save_invstd = o.save_invstd.strided(),
         .x = o.x.strided(), .weight = o.weight.strided(), .bias = o.bias.strided(),
         .running_mean = o.running_mean.strided(), .running_var = o.running_var.strided(), .eps = options.eps,
         .momentum = options.momentum});
  } else {
    cpu::batch_norm_batch_stats(o.save_mean.strided(), o.save_invstd.strided(), o.x.strided(), options.eps,
                                running);
    cpu::batch_norm_forward(bn.strided(), o.x.strided(), o.save_mean.strided(), o.save_invstd.strided(),
                            o.weight.strided(), o.bias.strided());
  }
  finish_unfused(o, bn, act);
}

struct BnGrads {
  Tensor dx, dweight, dbias, dresidual;
};

// bn(x) + z from the saved statistics, in x's dtype and layout: the input a
// row that saves its input differentiates at, when the fused forward kept only y.
Tensor recompute_pre_activation(const BnOperands& o) {
  Shape channel(static_cast<size_t>(o.x.dim()), 1);
  channel[1] = o.x.size(1);
  Tensor scale = mul(o.save_invstd, o.weight).reshape(channel);
  Tensor pre = add(mul(sub(o.x, o.save_mean.reshape(channel)), scale), o.bias.reshape(channel));
  if (o.z.defined()) pre = add(pre, o.z);
  return pre.to(o.x.dtype()).contiguous(o.x.suggest_memory_format());
}

bool derivative_from_output(const NormActivation& act) {
  return kernel::activation_info(act.kind).derivative_from_output;
}

// dpre = dL/d(bn(x) + z): the row's derivative of dy (+ dy_addend, when
// defined) at what the row saves. After a fused forward, which keeps no
// pre-activation, a clipping row reads y; any other row that saves its input
// recomputes bn(x) + z.
Tensor activation_grad(const BnOperands& o, const Tensor& dy, const NormActivation& act, const Tensor& dy_addend) {
  if (saves_input(act) && !o.pre.defined() && derivative_from_output(act)) {
    return loom_activation_grad(dy_addend.defined() ? add(dy, dy_addend) : dy, o.y, act);
  }
  const Tensor saved = !saves_input(act) ? o.y : o.pre.defined() ? o.pre : recompute_pre_activation(o);
  const MemoryFormat format = saved.suggest_memory_format();
  Tensor dpre = empty_like(saved);
  activation_detail::backward_kernel(dpre, dy.contiguous(format), saved, act.kind, act.parameters,
                                     dy_addend.defined() ? dy_addend.contiguous(format) : Tensor());
  return dpre;
}

// The training batch-norm backward of dpre on x's device and tier.
void bn_backward_of(BnGrads& g, const Tensor& dpre, const BnOperands& o) {
  if (on_onednn_tier(dpre) &&
      onednn::batch_norm_backward(g.dx.strided(), g.dweight.strided(), g.dbias.strided(), dpre.strided(),
                                  o.x.strided(), o.save_mean.strided(), o.save_invstd.strided(),
                                  o.weight.strided(), /*training=*/true)) {
    return;
  }
  if (!dpre.device().is_cuda()) {
    cpu::batch_norm_backward(g.dx.strided(), g.dweight.strided(), g.dbias.strided(), dpre.strided(),
                             o.x.strided(), o.save_mean.strided(), o.save_invstd.strided(), o.weight.strided(),
                             /*training=*/true);
    return;
  }
  cudnn::batch_norm_backward({.dx = g.dx.strided(), .dweight = g.dweight.strided(), .dbias = g.dbias.strided(),
                              .dy = dpre.strided(), .x = o.x.strided(), .weight = o.weight.strided(),
                              .save_mean = o.save_mean.strided(), .save_invstd = o.save_invstd.strided()});
}

// The derivative and the norm backward as one cuDNN graph, which adds dy_addend
// (when defined) as it reads dy; false where no engine runs it.
bool fused_bn_act_backward(BnGrads& g, const BnOperands& o, const Tensor& dy, const Tensor& dy_addend,
                           const NormActivation& act) {
  // dresidual gets a buffer of its own only on the paths that write one (the
  // others hand on dpre), so that a graph that does not run holds none.
  Tensor dz = o.residual ? empty_like(o.x) : Tensor();
  if (!cudnn::batch_norm_activation_backward(
          {.dx = g.dx.strided(), .dweight = g.dweight.strided(), .dbias = g.dbias.strided(),
           .dresidual = strided_or_none(dz), .dy = dy.strided(), .dy_addend = strided_or_none(dy_addend),
           .x = o.x.strided(), .y = o.y.strided(), .weight = o.weight.strided(), .bias = o.bias.strided(),
           .save_mean = o.save_mean.strided(), .save_invstd = o.save_invstd.strided(),
           .residual = strided_or_none(o.z), .activation = act})) {
    return false;
  }
  g.dresidual = dz;
  return true;
}

// dpre = the activation's derivative of dy + dy_addend (dy_addend may be
// undefined; dpre is dresidual), then the training batch-norm backward. The
// cuDNN graphs add the addend as they read dy (the fused one, or the
// derivative's, which a residual row runs: as much memory traffic as the sum
// and a fused graph without the addend); Loom's kernels take the sum first.
BnGrads bn_act_backward(const BnOperands& o, Tensor dy, const NormActivation& act, const Tensor& dy_addend) {
  DeviceGuard guard(o.x.device());
  const int64_t c = o.x.size(1);
  BnGrads g;
  g.dx = empty_like(o.x);
  g.dweight = empty({c}, channel_options(o.x));
  g.dbias = empty({c}, channel_options(o.x));
  cudnn::VariantWalk walk;  // the fused graphs, then the derivative and the plain norm backward
  if (try_fused(dy) && fused_bn_act_backward(g, o, dy, dy_addend, act)) return g;
  if (is_relu(act) && !dy.device().is_cuda() && !on_onednn_tier(dy)) {  // the mask and the backward in one pass
    if (dy_addend.defined()) dy = add(dy, dy_addend);
    g.dresidual = o.residual ? empty_like(o.x) : Tensor();
    cpu::batch_norm_relu_backward(g.dx.strided(), g.dweight.strided(), g.dbias.strided(),
                                  strided_or_none(g.dresidual), dy.strided(), o.x.strided(), o.y.strided(),
                                  o.save_mean.strided(), o.save_invstd.strided(), o.weight.strided());
    return g;
  }
  Tensor dpre = activation_grad(o, dy, act, dy_addend);
  if (o.residual) g.dresidual = dpre;
  bn_backward_of(g, dpre, o);
  return g;
}

// Running statistics the kernels updated in a contiguous copy go back to the caller's.
void write_back(const Tensor& running, const Tensor& updated) {
  if (!running.defined() || running.storage() == updated.storage()) return;
  Tensor(running).copy_(updated);
}

// The unfused composite of public ops: eval mode, mixed dtypes, an empty batch, and 16-bit
// inputs the fused graph declined (batch_norm knows their float32 parameters
// and cuDNN's 16-bit limits; add promotes mixed operands).
Tensor bn_act_composite(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& weight, const Tensor& bias, const BatchNormOptions& options,
                        const NormActivation& act, const Tensor& residual) {
  Tensor y = batch_norm(x, running_mean, running_var, weight, bias, options);
  const kernel::ActivationInfo& row = kernel::activation_info(act.kind);
  const std::vector<double> given(act.parameters.begin(), act.parameters.begin() + kernel::parameter_count(row));
  return activation(residual.defined() ? add(y, residual) : y, act.kind, given);
}

// Records y's backward: the gradients of x, weight, bias and residual.
void record_bn_act(Tensor& y, const BnOperands& o, const NormActivation& act, const Tensor& x,
                   const Tensor& weight, const Tensor& bias, const Tensor& residual) {
  const bool need_x = x.requires_grad(), need_weight = weight.defined() && weight.requires_grad();
  const bool need_bias = bias.defined() && bias.requires_grad();
  const bool need_residual = residual.defined() && residual.requires_grad();
  BnOperands saved = o;
  saved.y = o.y.detach();  // the output itself would hold its own node
  if (!saves_input(act)) saved.z = Tensor();        // every path differentiates at y
  if (derivative_from_output(act)) saved.pre = Tensor();  // Loom's kernel differentiates at y
  auto backward_sum = [=](const Tensor& dy, const Tensor& dy_addend) -> std::vector<Tensor> {
    const MemoryFormat format = saved.x.suggest_memory_format();
    const Tensor addend = dy_addend.defined() ? dy_addend.contiguous(format) : Tensor();
    BnGrads g = bn_act_backward(saved, dy.contiguous(format), act, addend);
    return {need_x ? g.dx : Tensor(), need_weight ? g.dweight : Tensor(), need_bias ? g.dbias : Tensor(),
            need_residual ? g.dresidual : Tensor()};
  };
  record(std::string(kBnOp), {x, weight, bias, residual}, y,
         [backward_sum](const Tensor& dy) { return backward_sum(dy, Tensor()); }, backward_sum,
         {saved.x, saved.y, saved.weight, saved.bias, saved.pre});
}

// batch_norm_activation's body; `who` names the public op in messages.
Tensor bn_act(std::string_view who, const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
              const Tensor& weight, const Tensor& bias, const BatchNormOptions& options, const NormActivation& act,
              const Tensor& residual) {
  check_bn_act_args(who, x, running_mean, running_var, weight, bias, options, residual);
  const bool mixed = residual.defined() && residual.dtype() != x.dtype();
  if (!options.training || mixed || x.numel() == 0) {  // batch_norm answers an empty batch
    return bn_act_composite(x, running_mean, running_var, weight, bias, options, act, residual);
  }
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    check_inplace(running_mean, who);
    check_inplace(running_var, who);
  }
  BnOperands o = bn_operands(x, running_mean, running_var, weight, bias, residual);
  bool fused = false;
  cudnn::VariantWalk walk;  // the fused graphs, then the plain norm (or the composite)
  if (o.x.device().is_cuda()) fused = bn_act_forward_fused(o, options, act);
  if (!fused && is_half_precision(x.dtype())) {
    return bn_act_composite(x, running_mean, running_var, weight, bias, options, act, residual);
  }
  {
    NoGradGuard no_grad;  // the running statistics are buffers, updated outside the tape
    if (!fused) bn_act_forward(o, options, act);
    write_back(running_mean, o.running_mean);
    write_back(running_var, o.running_var);
  }
  Tensor y = o.y;
  if (needs_grad({x, weight, bias, residual})) record_bn_act(y, o, act, x, weight, bias, residual);
  return y;
}

// batch_norm_activation, traced under its one name; `who` names the public op
// the user called in messages.
Tensor traced_bn_act(std::string_view who, const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, const BatchNormOptions& options, ActivationKind kind,
                     const std::vector<double>& parameters, const Tensor& residual) {
  trace::OpScope trace(kBnOp.data());  // a literal: null-terminated
  const NormActivation act{.kind = kind, .parameters = activation_parameters(kind, parameters, who)};
  Tensor y = bn_act(who, x, running_mean, running_var, weight, bias, options, act, residual);
  if (trace.recording()) {
    trace.record({x, running_mean, running_var, weight, bias, residual}, y,
                 {{"training", int64_t{options.training}}, {"momentum", options.momentum}, {"eps", options.eps},
                  {"activation", std::string(kernel::activation_info(kind).name)},
                  {"parameters", std::vector<double>(act.parameters.begin(), act.parameters.end())}});
  }
  return y;
}

}  // namespace

// Training: y = act((x - mean) * invstd * weight + bias + z) with batch statistics.
// dpre = act'(dy) at the pre-activation value (ReLU: dy where y > 0); dz = dpre;
// dx, dweight, dbias = batch-norm backward of dpre.
Tensor batch_norm_activation(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                             const Tensor& weight, const Tensor& bias, BatchNormOptions options,
                             ActivationKind kind, const std::vector<double>& parameters, const Tensor& residual) {
  return traced_bn_act(kBnOp, x, running_mean, running_var, weight, bias, options, kind, parameters, residual);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, BatchNormOptions options,
                       const Tensor& residual) {
  return traced_bn_act("batch_norm_relu", x, running_mean, running_var, weight, bias, options, ActivationKind::Relu,
                       {}, residual);
}

namespace fused_detail {

Tensor batch_norm_activation_absorbing_bias(const Tensor& x, const Tensor& conv_bias,
                                            const Tensor& running_mean, const Tensor& running_var,
                                            const Tensor& weight, const Tensor& bias, BatchNormOptions options,
                                            ActivationKind kind, const std::vector<double>& parameters,
                                            const Tensor& residual) {
  LOOM_CHECK(options.training, ValueError,
             "[{}] absorbs the conv's bias only in training mode, where the batch mean takes it "
             "out again; in eval mode add the bias first",
             kBnOp);
  LOOM_CHECK(conv_bias.defined() && conv_bias.dim() == 1 && x.dim() >= 2 && conv_bias.size(0) == x.size(1),
             ValueError, "[{}] the absorbed conv bias must be one value per channel ({}), got {}", kBnOp,
             x.dim() >= 2 ? x.size(1) : 0,
             conv_bias.defined() ? shape_str(conv_bias.sizes()) : std::string("none"));
  Tensor y = batch_norm_activation(x, running_mean, running_var, weight, bias, options, kind, parameters, residual);
  if (running_mean.defined() && x.numel() > 0) {  // an empty batch leaves the statistics as they are
    NoGradGuard no_grad;  // running = (1 - m) * running + m * mean(x), plus m * conv_bias
    Tensor running = running_mean;  // the same storage
    add_(running, conv_bias.detach().to(running_mean.dtype()), options.momentum);
  }
  if (!needs_grad({conv_bias})) return y;
  const Shape bias_sizes = conv_bias.sizes();
  const TensorOptions bias_options = conv_bias.options();
  Tensor out = y.detach();  // y's memory: this node passes dy through and zeroes the bias's gradient
  record("batch_norm_activation_absorbing_bias", {y, conv_bias}, out,
         [=](const Tensor& dy) -> std::vector<Tensor> { return {dy, zeros(bias_sizes, bias_options)}; });
  return out;
}

}  // namespace fused_detail

// ---- linear + ReLU ---------------------------------------------------------------------

namespace {

// relu(x . w^T + b) as one cuDNN graph; undefined where there is none.
Tensor linear_relu_fused(const Tensor& x, const Tensor& w, const Tensor& b) {
  DeviceGuard guard(x.device());
  const int64_t in = w.size(1), out = w.size(0);
  Tensor x2 = x.detach().contiguous().reshape({-1, in});
  Tensor wk = w.detach().contiguous(), bk = b.detach().contiguous();
  Tensor y2 = empty({x2.size(0), out}, x2.options());
  if (cudnn::linear_bias_relu_forward(y2.strided(), x2.strided(), wk.strided(), bk.strided())) {
    Shape y_sizes = x.sizes();
    y_sizes.back() = out;
    return y2.view(y_sizes);
  }
  return Tensor();
}

}  // namespace

// y = relu(x . w^T + b)
// g = dy where y > 0; dx = g . w, dw = g^T . x, db = sum of g over rows
// Under autocast, CUDA operands are cast to the autocast dtype first, as linear's.
Tensor linear_relu(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  trace::OpScope trace("linear_relu");
  auto traced = [&](const Tensor& y) {
    if (trace.recording()) trace.record({x_in, weight_in, bias_in}, y);
    return y;
  };
  const Tensor x = autocast_operand(x_in), weight = autocast_operand(weight_in),
               bias = autocast_operand(bias_in);
  linalg_detail::check_linear_args(x, weight, bias);
  Tensor y;
  cudnn::VariantWalk walk;  // the fused graph, then the plain linear
  if (try_fused(x) && bias.defined() && x.numel() > 0) y = linear_relu_fused(x, weight, bias);
  if (!y.defined()) {
    y = linear(x.detach(), weight.detach(), bias.defined() ? bias.detach() : Tensor());
    loom_activation(y, y);
  }
  if (!needs_grad({x, weight, bias})) return traced(y);
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  const int64_t in = weight.size(1), out = weight.size(0);
  Tensor saved_x = need_w ? x.detach() : Tensor(), saved_w = need_x ? weight.detach() : Tensor();
  Tensor saved_y = y.detach();
  Shape x_sizes = x.sizes();
  // Grad mode is off in backward: the ops below only compute.
  record("linear_relu", {x, weight, bias}, y,
         [=](const Tensor& dy) -> std::vector<Tensor> {
           const auto [g, db] = relu_grad_and_sum(dy, saved_y, out, need_b);
           Tensor dx = need_x ? matmul(g, saved_w).reshape(x_sizes) : Tensor();
           Tensor dw = need_w ? matmul(g.t(), saved_x.reshape({-1, in})) : Tensor();
           return {dx, dw, db};
         },
         {saved_x, saved_w, saved_y});
  return traced(y);
}

}  // namespace loom
