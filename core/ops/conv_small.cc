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
#include "core/cuda/copy.h"
#include "core/cuda/kernel_choice.h"
#include "core/cuda/matmul.h"
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

// Races Loom's pass against cuDNN's for this key (once; the choice is cached), then runs Loom's
// when it won and returns true; false leaves the pass to the caller's cuDNN path. Both
// candidates write `out` during the race; cudnn returns false where cuDNN has no engine for
// the graph (it then leaves the race).
bool run_if_loom_wins(cuda::KernelChoice& choice, std::string_view tier, std::string_view pass,
                      const Tensor& out, const Tensor& a, const Tensor& b, const kernel::ConvParams& p,
                      const std::function<void()>& loom, const std::function<bool()>& cudnn) {
  const std::string pick = choice.choose(
      tier_key(tier, pass, out, a, b, p), {std::string(kLoom), std::string(kCudnn)},
      [&] { return cuda::CandidateRuns{[&] { return loom(), true; }, cudnn}; });
  if (pick != kLoom) return false;
  loom();
  return true;
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
  return run_if_loom_wins(choice, tier, "wgrad", dw, dy, x, p, loom, cudnn);
}

// The patch tier's operands: x (N, C, P * R, Q * S) and y (N, K, P, Q) dense
// channels-last on the GPU, w (K, C, R, S) with R x S == the stride, R * S >= 2,
// no padding or dilation, one group. Only then are x's patches rows of one
// matrix after a copy, and y a matrix as it lies.
bool patch_geometry(const Tensor& x, const Tensor& w, const Tensor& y, const kernel::ConvParams& p) {
  if (!x.device().is_cuda() || x.dim() != 4 || w.dim() != 4 || y.dim() != 4) return false;
  if (x.numel() == 0 || w.numel() == 0 || y.numel() == 0) return false;
  const int64_t R = w.size(2), S = w.size(3);
  return p.groups == 1 && p.dilation_h == 1 && p.dilation_w == 1 && p.pad_h == 0 && p.pad_w == 0 &&
         R == p.stride_h && S == p.stride_w && R * S >= 2 && x.size(2) % R == 0 && x.size(3) % S == 0 &&
         x.is_contiguous(MemoryFormat::ChannelsLast) && y.is_contiguous(MemoryFormat::ChannelsLast);
}

// A channels-last x (N, C, P * R, Q * S) as (N, P, Q, R, S, C): each patch's
// pixels in the order of a channels-last filter's (K, R, S, C) memory.
Strided patch_view(const Tensor& x, int64_t R, int64_t S) {
  const int64_t N = x.size(0), C = x.size(1), P = x.size(2) / R, Q = x.size(3) / S, W = x.size(3);
  Strided v = x.strided();
  v.sizes = {N, P, Q, R, S, C};
  v.strides = {x.stride(0), R * W * C, S * C, W * C, C, 1};
  return v;
}

// Dense scratch of `sizes` in t's dtype on t's device (no autograd).
Tensor scratch_like(const Tensor& t, const Shape& sizes) {
  return empty(sizes, {.dtype = t.dtype(), .device = t.device()});
}

// A dense (rows, cols) matrix over `t`'s memory, or that matrix's transpose (cols, rows).
Strided matrix(const Tensor& t, int64_t rows, int64_t cols, bool transposed = false) {
  Strided m = t.strided();
  m.sizes = transposed ? Shape{cols, rows} : Shape{rows, cols};
  m.strides = transposed ? Shape{1, cols} : Shape{cols, 1};
  return m;
}

// A filter (K, C, R, S) of any strides as (K, R, S, C).
Strided filter_krsc(const Tensor& w) {
  Strided v = w.strided();
  v.sizes = {w.size(0), w.size(2), w.size(3), w.size(1)};
  v.strides = {w.stride(0), w.stride(2), w.stride(3), w.stride(1)};
  return v;
}

// The filter's dense (K, R, S, C) memory: itself when channels-last, else a
// copy (a filter is small).
Tensor filter_rows(const Tensor& w) {
  if (w.is_contiguous(MemoryFormat::ChannelsLast)) return w.detach();
  Tensor rows = scratch_like(w, {w.size(0), w.size(2), w.size(3), w.size(1)});
  cuda::copy(rows.strided(), filter_krsc(w));
  return rows;
}

// x's patches as the rows of a dense (N, P, Q, R, S, C) copy.
Tensor patch_rows(const Tensor& x, int64_t R, int64_t S) {
  Tensor u = scratch_like(x, {x.size(0), x.size(2) / R, x.size(3) / S, R, S, x.size(1)});
  cuda::copy(u.strided(), patch_view(x, R, S));
  return u;
}

}  // namespace

bool small_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(y.device());
  if (!y.device().is_cuda() || !cuda::conv_small_supported(x.strided(), w.strided(), p)) return false;
  auto loom = [&] { cuda::conv_small_forward(y.strided(), x.strided(), w.strided(), p); };
  auto cudnn = [&] { return cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), p, kSkipPending); };
  return run_if_loom_wins(small_conv_choice(), "conv_small", "forward", y, x, w, p, loom, cudnn);
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
  return run_if_loom_wins(small_conv_choice(), "conv_small", pass, y, x, w, p, loom, cudnn);
}

bool small_conv_dgrad(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(dx.device());
  if (!dx.device().is_cuda() || !cuda::conv_small_dgrad_supported(dy.strided(), w.strided(), p)) {
    return false;
  }
  auto loom = [&] { cuda::conv_small_dgrad(dx.strided(), dy.strided(), w.strided(), p); };
  auto cudnn = [&] { return cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p, kSkipPending); };
  return run_if_loom_wins(small_conv_choice(), "conv_small", "dgrad", dx, dy, w, p, loom, cudnn);
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
  const std::string_view pass = db.defined() ? "wgrad+bgrad" : "wgrad";
  return run_if_loom_wins(small_conv_choice(), "conv_small", pass, dw, dy, x, p, loom, cudnn);
}
bool depthwise_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(y.device());
  if (!y.device().is_cuda() || !cuda::conv_depthwise_supported(x.strided(), w.strided(), p)) return false;
  auto loom = [&] { cuda::conv_depthwise_forward(y.strided(), x.strided(), w.strided(), p); };
  auto cudnn = [&] { return cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), p, kSkipPending); };
  return run_if_loom_wins(depthwise_conv_choice(), "conv_depthwise", "forward", y, x, w, p, loom, cudnn);
}

bool depthwise_conv_dgrad(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(dx.device());
  if (!dx.device().is_cuda() || !cuda::conv_depthwise_supported(dx.strided(), w.strided(), p)) return false;
  auto loom = [&] { cuda::conv_depthwise_dgrad(dx.strided(), dy.strided(), w.strided(), p); };
  auto cudnn = [&] { return cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p, kSkipPending); };
  return run_if_loom_wins(depthwise_conv_choice(), "conv_depthwise", "dgrad", dx, dy, w, p, loom, cudnn);
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

// The patch tier: each patch's R * S * C pixels are one row of a matrix U
// (N * P * Q, R * S * C), a copy; then y = U . w^T, dU = dy . w and
// dw = dy^T . U are single matrix products (cuBLAS), dU scattered back by a copy.
bool patch_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(y.device());
  if (!patch_geometry(x, w, y, p)) return false;
  const int64_t K = w.size(0), rows = y.numel() / K, cols = w.numel() / K;
  auto loom = [&] {
    const Tensor u = patch_rows(x, w.size(2), w.size(3)), w_rows = filter_rows(w);
    cuda::matmul(matrix(y, rows, K), matrix(u, rows, cols), matrix(w_rows, K, cols, true));
  };
  auto cudnn = [&] { return cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), p, kSkipPending); };
  return run_if_loom_wins(patch_conv_choice(), "conv_patch", "forward", y, x, w, p, loom, cudnn);
}

bool patch_conv_dgrad(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p) {
  DeviceGuard guard(dx.device());
  if (!patch_geometry(dx, w, dy, p)) return false;
  const int64_t K = w.size(0), R = w.size(2), S = w.size(3), rows = dy.numel() / K, cols = w.numel() / K;
  auto loom = [&] {
    const Tensor du = scratch_like(dx, {dx.size(0), dy.size(2), dy.size(3), R, S, dx.size(1)});
    const Tensor w_rows = filter_rows(w);
    cuda::matmul(matrix(du, rows, cols), matrix(dy, rows, K), matrix(w_rows, K, cols));
    cuda::copy(patch_view(dx, R, S), du.strided());
  };
  auto cudnn = [&] { return cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), p, kSkipPending); };
  return run_if_loom_wins(patch_conv_choice(), "conv_patch", "dgrad", dx, dy, w, p, loom, cudnn);
}

bool patch_conv_wgrad(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p) {
  DeviceGuard guard(dw.device());
  if (!patch_geometry(x, dw, dy, p)) return false;
  const int64_t K = dw.size(0), rows = dy.numel() / K, cols = dw.numel() / K;
  auto loom = [&] {
    const Tensor u = patch_rows(x, dw.size(2), dw.size(3));
    const bool direct = dw.is_contiguous(MemoryFormat::ChannelsLast);
    const Tensor dw_rows = direct ? dw.detach() : scratch_like(dw, {dw.size(0), dw.size(2), dw.size(3), dw.size(1)});
    cuda::matmul(matrix(dw_rows, K, cols), matrix(dy, rows, K, true), matrix(u, rows, cols));
    if (!direct) cuda::copy(filter_krsc(dw), dw_rows.strided());
  };
  auto cudnn = [&] { return cudnn::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), p, kSkipPending); };
  return run_if_loom_wins(patch_conv_choice(), "conv_patch", "wgrad", dw, dy, x, p, loom, cudnn);
}

}  // namespace loom::conv_detail
