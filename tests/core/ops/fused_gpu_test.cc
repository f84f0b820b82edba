// File: tests/core/ops/fused_gpu_test.cc
// The fused ops on the GPU, fused and unfused (FusionGuard off), against the CPU
// reference, forward and every input gradient, in NCHW and channels-last under
// strict fp32 and tf32; the fused-run counters show which path ran.
//
// Errors are normalized: max |gpu - cpu| / max(max |cpu|, 1). Each check prints
// one "FUSED op layout policy path fwd=... bwd=... ran=..." line.
//
// N batch, C channels, H, W, K out channels.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/cudnn/fused.h"
#include "core/cudnn/plan_cache.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;
using Counter = int64_t cudnn::FusedRuns::*;

struct Tolerance {
  double fwd, bwd;
};
constexpr Tolerance kStrict{1e-5, 1e-4};  // as ops_gpu_test: conv/matmul/bn in strict fp32
constexpr Tolerance kTf32{5e-3, 1e-2};    // conv/matmul on tf32 tensor cores
constexpr MemoryFormat kLayouts[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast};

double normalized_error(const Tensor& actual, const Tensor& expected) {
  std::vector<double> a = testing::values(actual), b = testing::values(expected);
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 1;
  for (double v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    double e = std::fabs(a[i] - b[i]);
    if (std::isnan(e)) return INFINITY;
    worst = std::max(worst, e);
  }
  return worst / scale;
}

struct Run {
  Tensor y;
  std::vector<Tensor> grads;  // on the CPU; undefined for inputs without grad
};

// op on fresh leaves holding `inputs` on `device` (4-D ones in `format`), then backward of dy.
Run run(const OpFn& op, const std::vector<Tensor>& inputs, Device device, MemoryFormat format,
        const Tensor& dy) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.detach().to(device);
    if (leaf.dim() == 4) leaf = leaf.contiguous(format);
    leaves.push_back(leaf.requires_grad_(true));
  }
  Run r{op(leaves), {}};
  if (!dy.defined()) return r;  // forward only: to learn the output's shape
  r.y.backward(dy.to(device).contiguous(r.y.suggest_memory_format()));
  for (const Tensor& leaf : leaves) r.grads.push_back(leaf.grad().cpu());
  r.y = r.y.cpu();
  return r;
}

struct Errors {
  double fwd = 0, bwd = 0;
};

Errors compare(const Run& gpu, const Run& cpu) {
  Errors e{normalized_error(gpu.y, cpu.y), 0};
  for (size_t i = 0; i < cpu.grads.size(); ++i) e.bwd = std::max(e.bwd, normalized_error(gpu.grads[i], cpu.grads[i]));
  return e;
}

int64_t runs_of(const std::vector<Counter>& counters) {
  cudnn::FusedRuns runs = cudnn::fused_runs();
  int64_t total = 0;
  for (Counter c : counters) total += runs.*c;
  return total;
}

// The fused and the unfused GPU paths against the CPU. `expect_fused`: the doc
// (cudnn-graph-api.md sections 2 and 7) lists an engine for this pattern, layout
// and policy, so each counter must move; otherwise the fallback is fine too.
void check_paths(const std::string& name, const OpFn& op, const std::vector<Tensor>& inputs,
                 MemoryFormat format, Tolerance tol, const std::vector<Counter>& counters,
                 bool expect_fused, Generator& gen) {
  CAPTURE(name);
  CAPTURE(memory_format_name(format));
  CAPTURE(precision_name(numerics_policy().precision));
  Tensor y0 = run(op, inputs, Device::cpu(), format, Tensor()).y;
  Tensor dy = randn(y0.sizes(), {.dtype = y0.dtype()}, &gen);
  Run cpu = run(op, inputs, Device::cpu(), format, dy);
  const int64_t before = runs_of(counters);
  Run fused = run(op, inputs, testing::test_gpu(), format, dy);
  const int64_t fused_runs = runs_of(counters) - before;
  Run unfused;
  {
    FusionGuard off(false);
    unfused = run(op, inputs, testing::test_gpu(), format, dy);
  }
  CHECK_MESSAGE(runs_of(counters) - before == fused_runs, "a fused graph ran with fusion off");
  if (expect_fused) {
    CHECK_MESSAGE(fused_runs >= static_cast<int64_t>(counters.size()),
                  "expected the fused path; plan cache:\n" << cudnn::PlanCache::global().explain());
  }
  Errors f = compare(fused, cpu), u = compare(unfused, cpu);
  std::printf("FUSED %-24s %-13s %-11s fused   fwd=%.2e bwd=%.2e ran=%lld\n", name.c_str(),
              std::string(memory_format_name(format)).c_str(),
              std::string(precision_name(numerics_policy().precision)).c_str(), f.fwd, f.bwd,
              static_cast<long long>(fused_runs));
  std::printf("FUSED %-24s %-13s %-11s unfused fwd=%.2e bwd=%.2e\n", name.c_str(),
              std::string(memory_format_name(format)).c_str(),
              std::string(precision_name(numerics_policy().precision)).c_str(), u.fwd, u.bwd);
  CHECK(f.fwd <= tol.fwd);
  CHECK(f.bwd <= tol.bwd);
  CHECK(u.fwd <= tol.fwd);
  CHECK(u.bwd <= tol.bwd);
}

bool tf32() { return numerics_policy().precision == Precision::Tf32; }

}  // namespace

LOOM_GPU_TEST_CASE("conv2d_bias_relu and relu_conv2d: fused and unfused match the CPU") {
  Generator gen(61);
  for (Precision precision : {Precision::StrictFp32, Precision::Tf32}) {
    NumericsGuard policy({.precision = precision});
    Tolerance tol = tf32() ? kTf32 : kStrict;
    for (MemoryFormat f : kLayouts) {
      Tensor x = randn({4, 16, 9, 7}, {}, &gen), w = mul(randn({32, 16, 3, 3}, {}, &gen), 0.1);
      Tensor b = randn({32}, {}, &gen);
      Conv2dOptions o{.padding = {1, 1}};
      check_paths("conv2d_bias_relu", [&](auto& in) { return conv2d_bias_relu(in[0], in[1], in[2], o); },
                  {x, w, b}, f, tol, {&cudnn::FusedRuns::conv_bias_relu}, tf32(), gen);
      check_paths("conv2d_bias_relu(stride 2)",
                  [&](auto& in) { return conv2d_bias_relu(in[0], in[1], in[2], {.stride = {2, 2}}); },
                  {x, w, b}, f, tol, {&cudnn::FusedRuns::conv_bias_relu}, false, gen);
      check_paths("relu_conv2d", [&](auto& in) { return relu_conv2d(in[0], in[1], in[2], o); },
                  {x, w, b}, f, tol, {&cudnn::FusedRuns::dgrad_relu},
                  tf32() && f == MemoryFormat::ChannelsLast, gen);
    }
  }
}

LOOM_GPU_TEST_CASE("batch_norm_relu with and without a residual: fused and unfused match the CPU") {
  Generator gen(62);
  const std::vector<Counter> both = {&cudnn::FusedRuns::bn_activation_forward,
                                     &cudnn::FusedRuns::bn_activation_backward};
  for (MemoryFormat f : kLayouts) {
    for (bool with_residual : {false, true}) {
      Tensor x = add(mul(randn({8, 32, 6, 5}, {}, &gen), 2.0), 0.3);
      Tensor gamma = add(rand({32}, {}, &gen), 0.5), beta = randn({32}, {}, &gen);
      std::vector<Tensor> inputs = {x, gamma, beta};
      if (with_residual) inputs.push_back(randn({8, 32, 6, 5}, {}, &gen));
      auto op = [](const std::vector<Tensor>& in) {
        TensorOptions o{.device = in[0].device()};
        Tensor rm = zeros({32}, o), rv = ones({32}, o);
        return batch_norm_relu(in[0], rm, rv, in[1], in[2], {}, in.size() > 3 ? in[3] : Tensor());
      };
      // With a residual only the forward has a fused engine in cuDNN 9.19 (the
      // backward's did read a packed-bit ReLU mask, which Loom no longer writes:
      // the steps ran faster without it); its backward runs unfused.
      check_paths(with_residual ? "batch_norm_relu(+z)" : "batch_norm_relu", op, inputs, f, kStrict,
                  with_residual ? std::vector<Counter>{both[0]} : both, f == MemoryFormat::ChannelsLast, gen);
    }
  }
}

// Every activation row after a training batch norm, with and without a
// residual. ReLU6 (MobileNetV2's) must fuse its forward channels-last; the
// rows without a cuDNN mode, or whose graph has no engine, run the norm and
// the activation kernels, and every path matches the CPU.
LOOM_GPU_TEST_CASE("batch_norm_activation, every activation row: fused and unfused match the CPU") {
  Generator gen(65);
  for (ActivationKind kind : kernel::kActivationKinds) {
    const bool relu6 = kind == ActivationKind::Relu6;
    for (MemoryFormat f : kLayouts) {
      for (bool with_residual : {false, true}) {
        Tensor x = add(mul(randn({8, 32, 6, 5}, {}, &gen), 3.0), 1.0);
        Tensor gamma = add(rand({32}, {}, &gen), 0.5), beta = randn({32}, {}, &gen);
        std::vector<Tensor> inputs = {x, gamma, beta};
        if (with_residual) inputs.push_back(randn({8, 32, 6, 5}, {}, &gen));
        auto op = [kind](const std::vector<Tensor>& in) {
          TensorOptions o{.device = in[0].device()};
          Tensor rm = zeros({32}, o), rv = ones({32}, o);
          return batch_norm_activation(in[0], rm, rv, in[1], in[2], {}, kind, {},
                                       in.size() > 3 ? in[3] : Tensor());
        };
        const std::string name = fmt::format("bn_act {}{}", kernel::activation_info(kind).name,
                                             with_residual ? "(+z)" : "");
        const cudnn::FusedRuns before = cudnn::fused_runs();
        check_paths(name, op, inputs, f, kStrict, {&cudnn::FusedRuns::bn_activation_forward},
                    relu6 && f == MemoryFormat::ChannelsLast, gen);
        const cudnn::FusedRuns after = cudnn::fused_runs();
        std::printf("BNACT %-20s %-13s forward graphs %lld, backward graphs %lld\n", name.c_str(),
                    std::string(memory_format_name(f)).c_str(),
                    static_cast<long long>(after.bn_activation_forward - before.bn_activation_forward),
                    static_cast<long long>(after.bn_activation_backward - before.bn_activation_backward));
      }
    }
  }
}

// A residual block's output feeds the next block's convolution and its
// shortcut: the norm's backward gets both gradients and adds them as it reads
// them (into the fused graph, or the derivative's graph a residual row runs).
// One consumer reads y in NCHW whatever the layout, so the two arrive in
// different layouts in channels-last.
LOOM_GPU_TEST_CASE("batch_norm_activation whose output is used twice: fused and unfused match the CPU") {
  Generator gen(66);
  for (ActivationKind kind : {ActivationKind::Relu, ActivationKind::Relu6, ActivationKind::Silu}) {
    for (MemoryFormat f : kLayouts) {
      for (bool with_residual : {false, true}) {
        Tensor x = add(mul(randn({8, 32, 6, 5}, {}, &gen), 3.0), 1.0);
        Tensor gamma = add(rand({32}, {}, &gen), 0.5), beta = randn({32}, {}, &gen);
        std::vector<Tensor> inputs = {x, gamma, beta, randn({8, 32, 6, 5}, {}, &gen)};
        auto op = [kind, with_residual](const std::vector<Tensor>& in) {
          TensorOptions o{.device = in[0].device()};
          Tensor rm = zeros({32}, o), rv = ones({32}, o);
          Tensor y = batch_norm_activation(in[0], rm, rv, in[1], in[2], {}, kind, {},
                                           with_residual ? in[3] : Tensor());
          return add(mul(y, 0.5), mul(y.contiguous(), in[3]));
        };
        const std::string name = fmt::format("bn_act {}{} used twice", kernel::activation_info(kind).name,
                                             with_residual ? "(+z)" : "");
        check_paths(name, op, inputs, f, kStrict, {}, false, gen);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("linear_relu: fused under tf32, unfused under strict fp32, both match the CPU") {
  Generator gen(63);
  for (Precision precision : {Precision::StrictFp32, Precision::Tf32}) {
    NumericsGuard policy({.precision = precision});
    Tensor x = randn({64, 96}, {}, &gen), w = mul(randn({128, 96}, {}, &gen), 0.1);
    Tensor b = randn({128}, {}, &gen);
    const int64_t before = cudnn::fused_runs().matmul_bias_relu;
    check_paths("linear_relu", [](auto& in) { return linear_relu(in[0], in[1], in[2]); }, {x, w, b},
                MemoryFormat::Contiguous, tf32() ? kTf32 : kStrict,
                {&cudnn::FusedRuns::matmul_bias_relu}, tf32(), gen);
    if (!tf32()) CHECK(cudnn::fused_runs().matmul_bias_relu == before);  // no strict engine: never tried
  }
}

LOOM_GPU_TEST_CASE("the fused ops on non-contiguous and float64 GPU inputs fall back cleanly") {
  Generator gen(64);
  Tensor x = randn({2, 8, 6, 6}, {.dtype = DType::Float64}, &gen), w = randn({8, 8, 3, 3}, {.dtype = DType::Float64}, &gen);
  check_paths("conv2d_bias_relu(fp64)", [](auto& in) { return conv2d_bias_relu(in[0], in[1]); },
              {x, w}, MemoryFormat::Contiguous, kStrict, {&cudnn::FusedRuns::conv_bias_relu}, false, gen);
  Tensor t = randn({6, 8, 5, 2}, {}, &gen).transpose(0, 3);  // (2, 8, 5, 6), strided
  Tensor xs = t.slice(2, 0, 5, 2);
  Tensor g = xs.to(testing::test_gpu());
  Tensor y = conv2d_bias_relu(g, w.to(DType::Float32).to(testing::test_gpu()));
  CHECK_CLOSE(y.cpu(), relu(conv2d(xs, w.to(DType::Float32))), 5e-3, 5e-3);
}

// Under bf16 autocast (fp32 parameters, as the layers hold them) each fused op
// gives a bf16 output close to the unfused composite and to the CPU fp32
// reference on bf16-rounded inputs; its parameters get fp32 gradients.
LOOM_GPU_TEST_CASE("bf16 autocast: fused ops match the unfused composite and the CPU") {
  Generator gen(64);
  const double tol = 2e-2;
  std::vector<std::string> failed;
  auto expect = [&](bool ok, const std::string& what) {
    CHECK_MESSAGE(ok, what);
    if (!ok) failed.push_back(what);
  };
  auto rounded = [](const Tensor& t) { return t.to(DType::BFloat16).to(DType::Float32); };
  const Shape s = {8, 32, 6, 5};
  Tensor x = rounded(add(mul(randn(s, {}, &gen), 2.0), 0.3)), z = rounded(randn(s, {}, &gen));
  Tensor gamma = add(rand({32}, {}, &gen), 0.5), beta = randn({32}, {}, &gen);
  Tensor w = rounded(mul(randn({32, 32, 3, 3}, {}, &gen), 0.1)), b = rounded(randn({32}, {}, &gen));
  Tensor lw = rounded(mul(randn({16, 30}, {}, &gen), 0.2)), lb = rounded(randn({16}, {}, &gen));
  const Conv2dOptions co{.padding = {1, 1}};
  // CPU fp32 references.
  Tensor rm0 = zeros({32}), rv0 = ones({32});
  Tensor bn_ref = relu(add(batch_norm(x, rm0, rv0, gamma, beta, {}), z));
  Tensor conv_ref = relu(conv2d(x, w, b, co));
  Tensor rconv_ref = conv2d(relu(x), w, b, co);
  Tensor lin_ref = relu(linear(x.reshape({-1, 30}), lw, lb));
  for (bool fused : {true, false}) {
    FusionGuard fusion(fused);
    for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      const std::string tag = fmt::format("{} {}", fused ? "fused" : "unfused", memory_format_name(f));
      CAPTURE(tag);
      AutocastGuard autocast(DType::BFloat16);
      Tensor gx = x.to(DType::BFloat16).to(testing::test_gpu()).contiguous(f);
      Tensor gz = z.to(DType::BFloat16).to(testing::test_gpu()).contiguous(f);
      Tensor gg = gamma.to(testing::test_gpu()), gb = beta.to(testing::test_gpu());
      gg.requires_grad_();
      Tensor grm = zeros({32}, {.device = testing::test_gpu()}), grv = ones({32}, {.device = testing::test_gpu()});
      Tensor y = batch_norm_relu(gx, grm, grv, gg, gb, {}, gz);
      expect(y.dtype() == DType::BFloat16, tag + ": batch_norm_relu gives bf16");
      expect(normalized_error(y.to(DType::Float32).cpu(), bn_ref) <= tol, tag + ": batch_norm_relu value");
      sum(y.to(DType::Float32)).backward();
      expect(gg.grad().defined() && gg.grad().dtype() == DType::Float32,
             tag + ": batch_norm_relu fp32 weight grad");
      Tensor gw = w.to(testing::test_gpu()), gbias = b.to(testing::test_gpu());
      gw.requires_grad_();
      Tensor xf = x.to(testing::test_gpu()).contiguous(f);  // fp32: autocast casts it
      Tensor c1 = conv2d_bias_relu(xf, gw, gbias, co);
      expect(c1.dtype() == DType::BFloat16, tag + ": conv2d_bias_relu gives bf16");
      expect(normalized_error(c1.to(DType::Float32).cpu(), conv_ref) <= tol, tag + ": conv2d_bias_relu value");
      Tensor c2 = relu_conv2d(xf, gw, gbias, co);
      expect(normalized_error(c2.to(DType::Float32).cpu(), rconv_ref) <= tol, tag + ": relu_conv2d value");
      sum(add(c1, c2).to(DType::Float32)).backward();
      expect(gw.grad().defined() && gw.grad().dtype() == DType::Float32,
             tag + ": conv fp32 weight grad");
      Tensor l = linear_relu(xf.reshape({-1, 30}), lw.to(testing::test_gpu()), lb.to(testing::test_gpu()));
      expect(l.dtype() == DType::BFloat16, tag + ": linear_relu gives bf16");
      expect(normalized_error(l.to(DType::Float32).cpu(), lin_ref) <= tol, tag + ": linear_relu value");
    }
  }
  std::string list;
  for (const std::string& f : failed) list += "  FAILED " + f + "\n";
  MESSAGE(fmt::format("bf16 autocast summary: {} failure(s)\n{}", failed.size(), list));
}

#endif  // LOOM_WITH_CUDA
