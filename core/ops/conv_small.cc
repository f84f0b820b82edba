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

}  // namespace loom::conv_detail
