// File: tests/core/onednn/tier_test.cc
// Choosing the CPU tier: the reference tier runs no oneDNN primitive, oneDNN
// leaves float64 and the geometries it cannot describe to the reference
// kernels (channels-last operands through NCHW copies), batch norm and small
// weight gradients skip the implementations that spin at a barrier, 1x1 weight
// gradients run as one matrix product, memory-bound steps on small tensors run
// on the calling thread alone, and the library says what it runs.
//
// N batch, C channels, H, W input, K out channels.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

#include "core/cpu_backend.h"
#include "core/onednn/library.h"
#include "core/onednn/plan.h"
#include "core/onednn/tier.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

TEST_CASE("the reference tier runs no oneDNN primitive, and the guard restores the tier") {
  const CpuBackend before = cpu_backend();
  {
    CpuBackendGuard reference(CpuBackend::Reference);
    CHECK(cpu_backend() == CpuBackend::Reference);
    CHECK_FALSE(onednn::active());
    const int64_t runs = onednn::executions();
    Generator gen(1);
    conv2d(randn({2, 3, 8, 8}, {}, &gen), randn({4, 3, 3, 3}, {}, &gen));
    CHECK(onednn::executions() == runs);
  }
  CHECK(cpu_backend() == before);
  CHECK(cpu_backend_name(CpuBackend::Onednn) == "onednn");
  CHECK(cpu_backend_name(CpuBackend::Reference) == "reference");
}

TEST_CASE("oneDNN leaves float64 to the reference kernels") {
  CpuBackendGuard tier(CpuBackend::Onednn);
  REQUIRE(onednn::active());
  CHECK(onednn::takes(DType::Float32));
  CHECK_FALSE(onednn::takes(DType::Float64));
  Generator gen(2);
  const Tensor x = randn({2, 3, 6, 6}, {.dtype = DType::Float64}, &gen);
  const Tensor w = randn({5, 3, 3, 3}, {.dtype = DType::Float64}, &gen);
  const int64_t runs = onednn::executions();
  const Tensor y = conv2d(x, w, Tensor(), {.padding = 1});
  CHECK(onednn::executions() == runs);
  CpuBackendGuard reference(CpuBackend::Reference);
  CHECK_CLOSE(y, conv2d(x, w, Tensor(), {.padding = 1}), 0.0, 0.0);  // the same kernel
}

TEST_CASE("a channels-last convolution oneDNN cannot describe runs on the reference kernels") {
  // A transposed convolution whose output_padding row no window reaches at
  // stride 1: oneDNN's symmetric padding has no words for it.
  Generator gen(3);
  const Tensor x = randn({2, 4, 5, 5}, {}, &gen).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  const Tensor w = randn({4, 3, 3, 3}, {}, &gen);
  const ConvTranspose2dOptions o{.padding = 0, .output_padding = {1, 0}, .dilation = 2};
  Tensor y_fast, y_reference;
  {
    CpuBackendGuard tier(CpuBackend::Onednn);
    y_fast = conv_transpose2d(x, w, Tensor(), o);
  }
  {
    CpuBackendGuard tier(CpuBackend::Reference);
    y_reference = conv_transpose2d(x, w, Tensor(), o);
  }
  CHECK(y_fast.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(y_fast, y_reference, 1e-5, 1e-5);
}

TEST_CASE("batch norm runs on an implementation that does not spin at a barrier") {
  // oneDNN's first choice, bnorm_jit, meets its threads at a spinning barrier
  // (plan.cc); make_primitive_desc skips it for the next implementation.
  CpuBackendGuard tier(CpuBackend::Onednn);
  REQUIRE(onednn::active());
  Generator gen(4);
  const Tensor x = randn({4, 16, 8, 8}, {}, &gen).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  const Tensor weight = rand({16}, {}, &gen).requires_grad_(), bias = randn({16}, {}, &gen).requires_grad_();
  const int64_t runs = onednn::executions();
  const Tensor y = batch_norm(x, zeros({16}), ones({16}), weight, bias, {.training = true});
  sum(y * y).backward();
  CHECK(onednn::executions() >= runs + 2);  // the forward and the backward
  int norm_plans = 0;
  for (const std::string& line : onednn::plan_lines()) {
    if (line.rfind("batch_norm", 0) != 0) continue;
    INFO(line);
    ++norm_plans;
    CHECK(line.find("bnorm_jit:") == std::string::npos);
    CHECK(line.find("reference kernels") == std::string::npos);
  }
  CHECK(norm_plans >= 2);
}

TEST_CASE("small steps run on the calling thread, large ones and depthwise convolutions on the pool") {
  // Waking the pool's sleeping threads costs more than it saves below 2^19
  // elements for a memory-bound step and 2^22 multiply-adds for a dense
  // convolution or matrix product; a depthwise convolution keeps the pool (plan.cc).
  CpuBackendGuard tier(CpuBackend::Onednn);
  REQUIRE(onednn::active());
  onednn::clear_plans();
  Generator gen(5);
  for (int64_t hw : {8, 128}) {  // 4 * 16 * hw * hw: 4,096 and 1,048,576 elements
    const Tensor x = randn({4, 16, hw, hw}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
    batch_norm(x, zeros({16}), ones({16}), ones({16}), zeros({16}), {.training = true});
  }
  auto nhwc = [&](const Shape& sizes) { return randn(sizes, {}, &gen).contiguous(MemoryFormat::ChannelsLast); };
  conv2d(nhwc({1, 4, 8, 8}), randn({4, 4, 3, 3}, {}, &gen));        // 5,184 multiply-adds
  conv2d(nhwc({2, 64, 32, 32}), randn({64, 64, 3, 3}, {}, &gen));   // 66 M
  conv2d(nhwc({1, 8, 8, 8}), randn({8, 1, 3, 3}, {}, &gen), Tensor(), {.groups = 8});
  matmul(randn({16, 32}, {}, &gen), randn({32, 8}, {}, &gen));      // 4,096
  matmul(randn({256, 256}, {}, &gen), randn({256, 256}, {}, &gen));  // 16.8 M
  // A plan line starts with its key: the kind, then the dims ("conv_forward (1, 4, 8, 8, ...").
  struct Expected {
    std::string prefix, fragment;  // the line starts with prefix and holds fragment
    bool serial;
    int seen = 0;
  };
  std::vector<Expected> expected = {
      {"batch_norm", "4, 16, 8, 8", true},       {"batch_norm", "4, 16, 128, 128", false},
      {"conv_forward (1, 4, 8, 8", "", true},    {"conv_forward (2, 64, 32, 32", "", false},
      {"conv_forward (1, 8, 8, 8", "", false},   {"matmul (0, 16, 8", "", true},
      {"matmul (0, 256, 256", "", false}};
  for (const std::string& line : onednn::plan_lines()) {
    INFO(line);
    const bool serial = line.find("on the calling thread") != std::string::npos;
    for (Expected& e : expected) {
      if (line.rfind(e.prefix, 0) != 0 || line.find(e.fragment) == std::string::npos) continue;
      CHECK(serial == e.serial);
      ++e.seen;
    }
  }
  for (const Expected& e : expected) {
    CAPTURE(e.prefix);
    CAPTURE(e.fragment);
    CHECK(e.seen >= 1);
  }
}

TEST_CASE("convolution weight gradients run on an implementation that does not spin at a barrier") {
  // jit:avx512_core's and jit_1x1:avx512_core's weight gradients reduce their
  // threads' partial sums behind a spinning barrier (plan.cc), which calls this
  // small (1.2 M multiply-adds) do not amortize; their forward and data
  // gradient do not spin and stay.
  CpuBackendGuard tier(CpuBackend::Onednn);
  REQUIRE(onednn::active());
  Generator gen(5);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    const Tensor x = randn({4, 16, 8, 8}, {}, &gen).contiguous(format).requires_grad_();
    const Tensor w = randn({32, 16, 3, 3}, {}, &gen).contiguous(format).requires_grad_();
    const Tensor pointwise = randn({8, 32, 1, 1}, {}, &gen).contiguous(format).requires_grad_();
    const Tensor y = conv2d(conv2d(x, w, Tensor(), {.padding = 1}), pointwise, Tensor(), {});
    sum(y * y).backward();
  }
  int wgrad_plans = 0;
  for (const std::string& line : onednn::plan_lines()) {
    if (line.rfind("conv_wgrad", 0) != 0) continue;
    INFO(line);
    ++wgrad_plans;
    CHECK(line.find("jit:avx512_core") == std::string::npos);
    CHECK(line.find("jit_1x1:avx512_core") == std::string::npos);
    CHECK(line.find("reference kernels") == std::string::npos);
  }
  CHECK(wgrad_plans >= 4);  // 3x3 and 1x1, NCHW and channels-last
}

TEST_CASE("a large 3x3 weight gradient keeps the avx512 kernel that the small ones skip") {
  // jit:avx512_core's weight gradient spins at one barrier a call, which a
  // large call amortizes (plan.cc: from 2^26 multiply-adds); 8 * 32 * 32 output
  // pixels times 64 * 64 * 9 weights is 302 M. Where the CPU has no avx512
  // kernel for the forward either, there is nothing to keep.
  CpuBackendGuard tier(CpuBackend::Onednn);
  REQUIRE(onednn::active());
  onednn::clear_plans();
  Generator gen(7);
  const Tensor x = randn({8, 64, 32, 32}, {}, &gen).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  const Tensor w = randn({64, 64, 3, 3}, {}, &gen).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  sum(conv2d(x, w, Tensor(), {.padding = 1})).backward();
  bool avx512_forward = false;
  std::string wgrad;
  for (const std::string& line : onednn::plan_lines()) {
    if (line.rfind("conv_forward", 0) == 0) avx512_forward = line.find("avx512_core") != std::string::npos;
    if (line.rfind("conv_wgrad", 0) == 0) wgrad = line;
  }
  INFO(wgrad);
  REQUIRE_FALSE(wgrad.empty());
  if (avx512_forward) CHECK(wgrad.find("jit:avx512_core") != std::string::npos);
}

TEST_CASE("a 1x1 convolution's weight gradient runs on gemm:jit and matches float64") {
  // conv.cc prefers oneDNN's GEMM formulation for 1x1 filters (one matrix
  // product, no spinning barrier); random geometries in both layouts, each
  // against the reference kernels in float64.
  CpuBackendGuard tier(CpuBackend::Onednn);
  REQUIRE(onednn::active());
  onednn::clear_plans();
  Generator gen(6);
  std::mt19937 draw(6);
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(draw); };
  for (int i = 0; i < 8; ++i) {
    const MemoryFormat format = i % 2 == 0 ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast;
    const int64_t n = between(1, 4), c = between(1, 40), k = between(1, 40), h = between(1, 14), w = between(1, 14);
    const Conv2dOptions o{.stride = between(1, 2), .padding = between(0, 1)};
    const bool bias = between(0, 1) == 1;
    CAPTURE(fmt::format("N={} C={} K={} H={} W={} stride={} pad={} bias={} channels_last={}", n, c, k, h, w,
                        o.stride.h, o.padding.h, bias, format == MemoryFormat::ChannelsLast));
    const Tensor x = randn({n, c, h, w}, {.dtype = DType::Float64}, &gen).contiguous(format);
    const Tensor wt = randn({k, c, 1, 1}, {.dtype = DType::Float64}, &gen).contiguous(format);
    const Tensor b = randn({k}, {.dtype = DType::Float64}, &gen);
    std::vector<Tensor> grads[2];
    for (DType dtype : {DType::Float32, DType::Float64}) {  // oneDNN, then the reference kernels
      const Tensor xi = x.to(dtype).detach().requires_grad_(), wi = wt.to(dtype).detach().requires_grad_();
      const Tensor bi = b.to(dtype).detach().requires_grad_();
      const Tensor y = conv2d(xi, wi, bias ? bi : Tensor(), o);
      sum(y * y).backward();
      grads[dtype == DType::Float64] = {wi.grad(), xi.grad(), bias ? bi.grad() : Tensor()};
    }
    for (int g = 0; g < (bias ? 3 : 2); ++g) testing::check_scaled(grads[0][g], grads[1][g], 1e-4);
  }
  int wgrad_plans = 0;
  for (const std::string& line : onednn::plan_lines()) {
    if (line.rfind("conv_wgrad", 0) != 0) continue;
    INFO(line);
    ++wgrad_plans;
    CHECK(line.find("gemm:jit") != std::string::npos);
  }
  CHECK(wgrad_plans >= 2);  // NCHW and channels-last
}

TEST_CASE("the library says which oneDNN and instruction set it runs") {
  REQUIRE(onednn::library() != nullptr);
  CHECK(onednn::describe().rfind("oneDNN 2.", 0) == 0);
  CHECK(onednn::load_failure().empty());
}

}  // namespace
}  // namespace loom
