// File: tests/layers/fused_residual_gpu_test.cc
// nn::fuse's residual matching on the GPU: resnet9-like residual blocks
// (Residual(conv_bn, conv_bn), whose add follows bn -> relu; Residual(conv +
// bias -> relu), whose add is a conv epilogue step; Residual(bn -> relu)),
// fused, on CUDA against the CPU, with fusion on and off: the output, the
// running statistics and the gradient of the input and of every parameter,
// NCHW and channels-last, strict fp32 and bf16 autocast. Then the fusion
// report lists each residual step and says why the add after bn -> relu runs
// on its own. Each check prints "RESIDUAL layout policy fused|unfused fwd=... bwd=...".
//
// Errors are testing::normalized_error's: max |gpu - cpu| / max(max |cpu|, 1);
// under bf16 a gradient may instead pass as a few ReLU decision flips
// (testing::decision_flips), and the CPU reference takes the input and the conv
// weights and biases rounded to bf16 as autocast rounds them.
//
// N batch, C channels, H, W.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/fused.h"
#include "core/ops/fusion_report.h"
#include "core/ops/ops.h"
#include "layers/fused.h"
#include "layers/nn.h"
#include "tests/testing.h"

using namespace loom;

namespace {

using Policy = testing::ParityPolicy;
constexpr Policy kPolicies[] = {testing::kStrictFp32Parity, testing::kBf16Parity};

nn::Sequential conv_bn(int64_t in, int64_t out) {
  return nn::Sequential(nn::Conv2d(in, out, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(out), nn::ReLU());
}

// x (N, 3, H, W) -> (N, 16, H, W), every residual fused by nn::fuse.
nn::Sequential residual_net() {
  nn::Sequential net(conv_bn(3, 16), nn::Residual(conv_bn(16, 16), conv_bn(16, 16)),
                     nn::Residual(nn::Sequential(nn::Conv2d(16, 16, 3, {.padding = 1}), nn::ReLU())),
                     nn::Residual(nn::Sequential(nn::BatchNorm2d(16), nn::ReLU())));
  nn::fuse(net);
  return net;
}

struct Run {
  Tensor y;                      // float32, on the CPU
  std::vector<Tensor> grads;     // dx, then each parameter's
  std::vector<Tensor> buffers;   // running statistics after the forward
};

// The fused net with `weights` on `device` (in `format`): a training forward of x, backward of dy.
Run run(const StateDict& weights, const Tensor& x_in, const Tensor& dy, Device device, MemoryFormat format) {
  nn::Sequential net = residual_net();
  net.load_state_dict(weights);
  net.to(device);
  net.to(format);
  Tensor x = x_in.detach().to(device).contiguous(format);  // a leaf of its own: the CPU run must not mark x_in
  x.requires_grad_(true);
  const Tensor y = net(x);
  y.backward(dy.to(device).to(y.dtype()).contiguous(y.suggest_memory_format()));
  Run r{y.cpu().to(DType::Float32), {x.grad().cpu().to(DType::Float32)}, {}};
  for (const auto& [name, p] : net.named_parameters()) r.grads.push_back(p.grad().cpu().to(DType::Float32));
  for (const auto& [name, b] : net.named_buffers()) {
    if (is_floating(b.dtype())) r.buffers.push_back(b.cpu().to(DType::Float32));
  }
  return r;
}

Tensor round_to_bf16(const Tensor& t) { return t.to(testing::test_gpu()).to(DType::BFloat16).to(DType::Float32).cpu(); }

// The weights with every conv's weight and bias rounded to bf16, as autocast rounds them.
StateDict rounded_like_autocast(const StateDict& weights) {
  nn::Sequential net = residual_net();
  std::vector<std::string> conv_tensors;
  for (const auto& [path, module] : net.named_modules()) {
    if (dynamic_cast<const nn::Conv2d*>(module.get()) == nullptr) continue;
    conv_tensors.push_back(path + ".weight");
    conv_tensors.push_back(path + ".bias");
  }
  StateDict rounded;
  for (const auto& [name, t] : weights) {
    const bool conv = std::find(conv_tensors.begin(), conv_tensors.end(), name) != conv_tensors.end();
    rounded.push_back({name, conv ? round_to_bf16(t) : t.clone()});
  }
  return rounded;
}

struct Errors {
  double fwd = 0, bwd = 0;
  int flips = 0;
};

Errors compare(const Run& gpu, const Run& cpu, const Policy& policy) {
  Errors e{testing::normalized_error(gpu.y, cpu.y), 0, 0};
  for (size_t i = 0; i < cpu.buffers.size(); ++i) {
    e.fwd = std::max(e.fwd, testing::normalized_error(gpu.buffers[i], cpu.buffers[i]));
  }
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    const double error = testing::normalized_error(gpu.grads[i], cpu.grads[i]);
    if (error > policy.bwd && policy.bf16 && testing::decision_flips(gpu.grads[i], cpu.grads[i], policy.bwd)) {
      ++e.flips;
      continue;
    }
    e.bwd = std::max(e.bwd, error);
  }
  return e;
}

// The report's entry for the block whose description is `block`.
std::optional<fusion::BlockReport> report_of(const std::string& block) {
  for (const fusion::BlockReport& r : fusion::block_reports()) {
    if (r.block == block) return r;
  }
  return std::nullopt;
}

}  // namespace

LOOM_GPU_TEST_CASE("fused residual blocks on CUDA match the CPU, forward and every gradient, fused and unfused") {
  Generator gen(31);
  const StateDict weights = residual_net().state_dict();
  const Tensor x = randn({4, 3, 8, 8}, {}, &gen), dy = randn({4, 16, 8, 8}, {}, &gen);
  const Run cpu_fp32 = run(weights, x, dy, Device::cpu(), MemoryFormat::Contiguous);
  const Run cpu_bf16 = run(rounded_like_autocast(weights), round_to_bf16(x), dy, Device::cpu(), MemoryFormat::Contiguous);
  fusion::clear_report();
  for (const Policy& policy : kPolicies) {
    const Run& cpu = policy.bf16 ? cpu_bf16 : cpu_fp32;
    for (MemoryFormat format : testing::kParityLayouts) {
      NumericsGuard numerics({.precision = policy.precision});
      std::optional<AutocastGuard> autocast;
      if (policy.bf16) autocast.emplace(DType::BFloat16);
      const char* layout = format == MemoryFormat::ChannelsLast ? "nhwc" : "nchw";
      CAPTURE(policy.name);
      CAPTURE(layout);
      for (bool fused : {true, false}) {
        CAPTURE(fused);
        FusionGuard guard(fused);
        const Errors e = compare(run(weights, x, dy, testing::test_gpu(), format), cpu, policy);
        std::printf("RESIDUAL %s %s %s fwd=%.2e bwd=%.2e decision_flips=%d\n", layout, policy.name,
                    fused ? "fused" : "unfused", e.fwd, e.bwd, e.flips);
        CHECK(e.fwd <= policy.fwd);
        CHECK(e.bwd <= policy.bwd);
      }
    }
  }

  std::printf("%s", fusion::report().c_str());
  const auto after_relu = report_of("conv2d(stride=1, padding=1) -> batch_norm -> relu -> add_residual");
  REQUIRE(after_relu.has_value());
  REQUIRE(after_relu->pieces.size() == 3);
  CHECK(after_relu->pieces[1].how == "fused op batch_norm_activation (relu)");
  CHECK(after_relu->pieces[2].piece == "[add_residual]");
  CHECK(after_relu->pieces[2].how == "unfused");
  CHECK(after_relu->pieces[2].why_not.find("the residual add comes after the activation") != std::string::npos);
  const auto epilogue = report_of("conv2d(stride=1, padding=1) -> bias -> relu -> add_residual");
  REQUIRE(epilogue.has_value());
  REQUIRE(epilogue->pieces.size() == 1);  // the add is the graph's last pointwise step
  CHECK(epilogue->pieces[0].piece == "[conv2d(stride=1, padding=1) -> bias -> relu -> add_residual]");
  const auto norm = report_of("batch_norm -> relu -> add_residual");
  REQUIRE(norm.has_value());
  CHECK(norm->pieces.back().piece == "[add_residual]");
}

LOOM_GPU_TEST_CASE("a fused residual net in eval mode matches the CPU, and the report says why its batch norms ran alone") {
  Generator gen(32);
  nn::Sequential cpu_net = residual_net();
  const Tensor x = randn({4, 3, 8, 8}, {}, &gen);
  cpu_net(x);  // running statistics of one batch
  cpu_net.eval();
  nn::Sequential gpu_net = residual_net();
  gpu_net.load_state_dict(cpu_net.state_dict());
  gpu_net.eval();
  gpu_net.to(testing::test_gpu());
  NumericsGuard numerics({.precision = Precision::StrictFp32});
  fusion::clear_report();
  for (MemoryFormat format : testing::kParityLayouts) {
    gpu_net.to(format);
    const double e = testing::normalized_error(gpu_net(x.to(testing::test_gpu()).contiguous(format)).cpu(), cpu_net(x));
    CAPTURE(format == MemoryFormat::ChannelsLast);
    CHECK(e <= kPolicies[0].fwd);
  }
  const auto after_relu = report_of("conv2d(stride=1, padding=1) -> batch_norm(eval) -> relu -> add_residual");
  REQUIRE(after_relu.has_value());
  REQUIRE(after_relu->pieces.size() == 3);
  CHECK(after_relu->pieces[1].why_not.find("eval mode") != std::string::npos);
  CHECK(after_relu->pieces[2].piece == "[relu -> add_residual]");
}

#endif  // LOOM_WITH_CUDA
