// File: core/ops/conv_small.cc
// The small-channel, depthwise and tensor-core weight-gradient convolution
// tiers and their races against cuDNN (conv_small_internal.h).
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include "core/ops/conv_small_internal.h"

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/cuda/conv_depthwise.h"
#include "core/cuda/conv_small.h"
#include "core/cuda/conv_wgrad_mma.h"
#include "core/cuda/kernel_choice.h"
#include "core/cuda/scratch.h"
#include "core/cudnn/conv.h"
#include "core/numerics.h"
#include "core/ops/conv_internal.h"
#include "core/ops/dispatch.h"

namespace loom::conv_detail {

namespace {

constexpr std::string_view kLoom = "loom", kCudnn = "cudnn";
// A cuDNN candidate whose plan lazy mode still builds leaves the race (conv.h):
// Loom's kernel runs meanwhile, and the race runs again after the swap.
constexpr cudnn::WhilePending kSkipPending = cudnn::WhilePending::Skip;

cuda::KernelChoice& small_conv_choice() {
  static cuda::KernelChoice choice("LOOM_CONV_SMALL");
  return choice;
}

cuda::KernelChoice& depthwise_conv_choice() {
  static cuda::KernelChoice choice("LOOM_CONV_DEPTHWISE");
  return choice;
}

cuda::KernelChoice& patch_conv_choice() {
  static cuda::KernelChoice choice("LOOM_CONV_PATCH");
  return choice;
}

cuda::KernelChoice& wgrad_mma_choice() {
  static cuda::KernelChoice choice("LOOM_CONV_WGRAD_MMA");
  return choice;
}

// Everything the two paths' speed depends on: tier, pass, dtype, every
// operand's sizes and strides, the geometry and the numerics policy cuDNN
// plans under.
std::string tier_key(std::string_view tier, std::string_view pass, const Tensor& out, const Tensor& a,
                     const Tensor& b, const kernel::ConvParams& p) {
  const NumericsPolicy& policy = numerics_policy();
  return fmt::format("{} {} {} {}{} {}{} {}{} stride {}x{} pad {}x{} dilation {}x{} groups {} {} "
                     "deterministic {}",
                     tier, pass, dtype_name(out.dtype()), shape_str(out.sizes()), shape_str(out.strides()),
                     shape_str(a.sizes()), shape_str(a.strides()), shape_str(b.sizes()),
                     shape_str(b.strides()), p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h,
                     p.dilation_w, p.groups, precision_name(policy.precision), policy.deterministic);
}

// Both candidates write `out`, which the chosen one then overwrites; cudnn
// returns false where cuDNN has no engine for the graph (it then leaves the race).
bool loom_chosen(cuda::KernelChoice& choice, std::string_view tier, std::string_view pass,
                 const Tensor& out, const Tensor& a, const Tensor& b, const kernel::ConvParams& p,
                 const std::function<void()>& loom, const std::function<bool()>& cudnn) {
  const std::string pick = choice.choose(
      tier_key(tier, pass, out, a, b, p), {std::string(kLoom), std::string(kCudnn)},
      [&] { return cuda::CandidateRuns{[&] { return loom(), true; }, cudnn}; });
  return pick == kLoom;
}

bool small_chosen(std::string_view pass, const Tensor& out, const Tensor& a, const Tensor& b,
                  const kernel::ConvParams& p, const std::function<void()>& loom,
                  const std::function<bool()>& cudnn) {
  return loom_chosen(small_conv_choice(), "conv_small", pass, out, a, b, p, loom, cudnn);
}

// A Loom kernel's scratch, allocated on the kernel's first run only: where cuDNN wins the race, nothing is.
class FirstRunScratch {
 public:
  FirstRunScratch(Device device, std::function<cuda::Scratch()> need) : device_(device), need_(std::move(need)) {}

  Strided operator()() {
    if (!held_.defined()) {
      const cuda::Scratch n = need_();
      held_ = empty({n.elements}, {.dtype = n.dtype, .device = device_});
    }
    return held_.strided();
  }

 private:
  Device device_;
  std::function<cuda::Scratch()> need_;
  Tensor held_;
};

// Races a Loom weight-gradient kernel, run(scratch), against cuDNN's wgrad of dw under `tier`, and runs
// the winner's pass when it is Loom's (returning true).
bool raced_wgrad(cuda::KernelChoice& choice, std::string_view tier, const Tensor& dw, const Tensor& dy,
                 const Tensor& x, const kernel::ConvParams& p, std::function<cuda::Scratch()> need,
                 const std::function<void(const Strided&)>& run) {
  FirstRunScratch scratch(dw.device(), std::move(need));
  auto loom = [&] { run(scratch()); };
  auto cudnn = [&] { return cudnn::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), p, kSkipPending); };
  if (!loom_chosen(choice, tier, "wgrad", dw, dy, x, p, loom, cudnn)) return false;
  loom();
  return true;
}

bool depthwise_chosen(std::string_view pass, const Tensor& out, const Tensor& a, const Tensor& b,
                      const kernel::ConvParams& p, const std::function<void()>& loom,
                      const std::function<bool()>& cudnn) {
  return loom_chosen(depthwise_conv_choice(), "conv_depthwise", pass, out, a, b, p, loom, cudnn);
}

// The patch tier's geometry: filter R x S == stride, R * S >= 2, no padding or
// dilation, one group, and x's plane (N, C, H, W) made of whole patches.
bool patch_geometry(const Tensor& x, const Tensor& w, const kernel::ConvParams& p) {
  if (!x.device().is_cuda() || x.dim() != 4 || w.dim() != 4) return false;
  const int64_t R = w.size(2), S = w.size(3);
  return p.groups == 1 && p.dilation_h == 1 && p.dilation_w == 1 && p.pad_h == 0 && p.pad_w == 0 &&
         R == p.stride_h && S == p.stride_w && R * S >= 2 && x.size(2) % R == 0 && x.size(3) % S == 0;
}

// t (N, C, P * R, Q * S) as (N, C, R, S, P, Q): pixel (r, s) of each patch, a view.
Tensor patch_pixels(const Tensor& t, int64_t R, int64_t S) {
  const int64_t P = t.size(2) / R, Q = t.size(3) / S;
  return t.view({t.size(0), t.size(1), P, R, Q, S}).permute({0, 1, 3, 5, 2, 4});
}

// u (N, C * R * S, P, Q) as (N, C, R, S, P, Q), a view.
Tensor channel_pixels(const Tensor& u, int64_t R, int64_t S) {
  return u.view({u.size(0), u.size(1) / (R * S), R, S, u.size(2), u.size(3)});
}

// x's patches as channels: (N, C * R * S, P, Q) in x's memory format.
Tensor unshuffled(const Tensor& x, int64_t R, int64_t S) {
  TensorOptions options = x.options();
  options.requires_grad = false;
  options.memory_format = x.suggest_memory_format();
  Tensor u = empty({x.size(0), x.size(1) * R * S, x.size(2) / R, x.size(3) / S}, options);
  channel_pixels(u, R, S).copy_(patch_pixels(x.detach(), R, S));
  return u;
}

// A (K, C, R, S) filter as the 1x1 filter (K, C * R * S, 1, 1) in `format`.
Tensor as_1x1(const Tensor& w, MemoryFormat format) {
  return w.detach().contiguous().view({w.size(0), w.size(1) * w.size(2) * w.size(3), 1, 1}).contiguous(format);
}

}  // namespace

bool small_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(y.device());
  if (!y.device().is_cuda() || !cuda::conv_small_supported(x.strided(), w.strided(), p)) return false;
  auto loom = [&] { cuda::conv_small_forward(y.strided(), x.strided(), w.strided(), p); };
  auto cudnn = [&] { return cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), p, kSkipPending); };
  if (!small_chosen("forward", y, x, w, p, loom, cudnn)) return false;
  loom();
  return true;
}

bool small_conv_bias_relu_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                                  const kernel::ConvParams& p) {
  DeviceGuard guard(y.device());
  if (!y.device().is_cuda() || !cuda::conv_small_supported(x.strided(), w.strided(), p)) return false;
  const cuda::SmallConvEpilogue epilogue{.bias = strided_or_none(b), .relu = true};
  if (!cuda::conv_small_epilogue_supported(epilogue, w.strided())) return false;
  auto loom = [&] { cuda::conv_small_forward(y.strided(), x.strided(), w.strided(), p, epilogue); };
  auto cudnn = [&] {
    return cudnn::conv2d_bias_relu_forward(y.strided(), x.strided(), w.strided(), epilogue.bias, p);
  };
  const std::string_view pass = b.defined() ? "forward+bias+relu" : "forward+relu";
  if (!small_chosen(pass, y, x, w, p, loom, cudnn)) return false;
  loom();
  return true;
}

bool small_conv_dgrad(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(dx.device());
  if (!dx.device().is_cuda() || !cuda::conv_small_dgrad_supported(dy.strided(), w.strided(), p)) {
    return false;
  }
  auto loom = [&] { cuda::conv_small_dgrad(dx.strided(), dy.strided(), w.strided(), p); };
  auto cudnn = [&] { return cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p, kSkipPending); };
  if (!small_chosen("dgrad", dx, dy, w, p, loom, cudnn)) return false;
  loom();
  return true;
}

bool small_conv_wgrad(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p,
                      const Tensor& db) {
  DeviceGuard guard(dw.device());
  if (!dw.device().is_cuda() || !cuda::conv_small_supported(x.strided(), dw.strided(), p)) return false;
  if (db.defined() && !cuda::conv_small_wgrad_takes_bias(dw.strided())) return false;
  FirstRunScratch scratch(dw.device(), [&] { return cuda::conv_small_wgrad_scratch(dy.strided(), dw.strided()); });
  const std::optional<Strided> db_view = strided_or_none(db);
  auto loom = [&] { cuda::conv_small_wgrad(dw.strided(), dy.strided(), x.strided(), p, scratch(), db_view); };
  auto cudnn = [&] {
    if (!cudnn::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), p, kSkipPending)) return false;
    if (db.defined()) bgrad_kernel(db, dy);
    return true;
  };
  if (!small_chosen(db.defined() ? "wgrad+bgrad" : "wgrad", dw, dy, x, p, loom, cudnn)) return false;
  loom();
  return true;
}
bool depthwise_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(y.device());
  if (!y.device().is_cuda() || !cuda::conv_depthwise_supported(x.strided(), w.strided(), p)) return false;
  auto loom = [&] { cuda::conv_depthwise_forward(y.strided(), x.strided(), w.strided(), p); };
  auto cudnn = [&] { return cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), p, kSkipPending); };
  if (!depthwise_chosen("forward", y, x, w, p, loom, cudnn)) return false;
  loom();
  return true;
}

bool depthwise_conv_dgrad(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(dx.device());
  if (!dx.device().is_cuda() || !cuda::conv_depthwise_supported(dx.strided(), w.strided(), p)) return false;
  auto loom = [&] { cuda::conv_depthwise_dgrad(dx.strided(), dy.strided(), w.strided(), p); };
  auto cudnn = [&] { return cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p, kSkipPending); };
  if (!depthwise_chosen("dgrad", dx, dy, w, p, loom, cudnn)) return false;
  loom();
  return true;
}

bool depthwise_conv_wgrad(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p) {
  DeviceGuard guard(dw.device());
  if (!dw.device().is_cuda() || !cuda::conv_depthwise_supported(x.strided(), dw.strided(), p)) return false;
  const auto need = [&] { return cuda::conv_depthwise_wgrad_scratch(dy.strided(), dw.strided()); };
  return raced_wgrad(depthwise_conv_choice(), "conv_depthwise", dw, dy, x, p, need, [&](const Strided& scratch) {
    cuda::conv_depthwise_wgrad(dw.strided(), dy.strided(), x.strided(), p, scratch);
  });
}

bool mma_conv_wgrad(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p) {
  DeviceGuard guard(dw.device());
  if (!dw.device().is_cuda() || !cuda::conv_wgrad_mma_supported(dw.strided(), dy.strided(), x.strided(), p)) {
    return false;
  }
  // Float32 operands are multiplied in TF32: only where the policy allows TF32.
  if (x.dtype() == DType::Float32 && numerics_policy().precision != Precision::Tf32) return false;
  const auto need = [&] { return cuda::conv_wgrad_mma_scratch(dw.strided(), dy.strided(), x.strided(), p); };
  return raced_wgrad(wgrad_mma_choice(), "conv_wgrad_mma", dw, dy, x, p, need, [&](const Strided& scratch) {
    cuda::conv_wgrad_mma(dw.strided(), dy.strided(), x.strided(), p, scratch);
  });
}

bool patch_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(y.device());
  if (!patch_geometry(x, w, p)) return false;
  const int64_t R = w.size(2), S = w.size(3);
  auto loom = [&] {
    const Tensor u = unshuffled(x, R, S);
    cudnn::conv2d_forward(y.strided(), u.strided(), as_1x1(w, u.suggest_memory_format()).strided(), {});
  };
  auto cudnn = [&] { return cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), p, kSkipPending); };
  if (!loom_chosen(patch_conv_choice(), "conv_patch", "forward", y, x, w, p, loom, cudnn)) return false;
  loom();
  return true;
}

bool patch_conv_dgrad(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(dx.device());
  if (!patch_geometry(dx, w, p)) return false;
  const int64_t R = w.size(2), S = w.size(3);
  auto loom = [&] {
    TensorOptions options = dy.options();
    options.requires_grad = false;
    options.memory_format = dx.suggest_memory_format();
    const Tensor u = empty({dx.size(0), dx.size(1) * R * S, dy.size(2), dy.size(3)}, options);
    cudnn::conv2d_dgrad(u.strided(), dy.strided(), as_1x1(w, u.suggest_memory_format()).strided(), {});
    patch_pixels(dx, R, S).copy_(channel_pixels(u, R, S));
  };
  auto cudnn = [&] { return cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p, kSkipPending); };
  if (!loom_chosen(patch_conv_choice(), "conv_patch", "dgrad", dx, dy, w, p, loom, cudnn)) return false;
  loom();
  return true;
}

bool patch_conv_wgrad(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p) {
  DeviceGuard guard(dw.device());
  if (!patch_geometry(x, dw, p)) return false;
  const int64_t K = dw.size(0), C = dw.size(1), R = dw.size(2), S = dw.size(3);
  auto loom = [&] {
    const Tensor u = unshuffled(x, R, S);
    TensorOptions options = dw.options();
    options.requires_grad = false;
    options.memory_format = u.suggest_memory_format();
    const Tensor dw1 = empty({K, C * R * S, 1, 1}, options);
    cudnn::conv2d_wgrad(dw1.strided(), dy.strided(), u.strided(), {});
    Tensor(dw).copy_(dw1.contiguous().view({K, C, R, S}));  // a handle on dw's storage
  };
  auto cudnn = [&] { return cudnn::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), p, kSkipPending); };
  if (!loom_chosen(patch_conv_choice(), "conv_patch", "wgrad", dw, dy, x, p, loom, cudnn)) return false;
  loom();
  return true;
}

}  // namespace loom::conv_detail
