// File: tests/core/ops/activation_gpu_test.cc
// Every activation row (core/kernel/activation.h) on the GPU against the CPU
// reference, forward and backward, NCHW and channels-last: a small tensor
// (Loom's kernel: 120 elements have no packed cuDNN view) and a larger one
// (8192 elements: the row's cuDNN pointwise graph where it has a mode and an
// engine, the kernel otherwise). Ends with the plan cache's listing.
// N batch, C channels, H, W.
#include <doctest/doctest.h>

#include <cstdio>

#include "core/ops/ops.h"
#include "tests/testing.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/plan_cache.h"
#endif

using namespace loom;

namespace {

// float32 elementwise math; cuDNN's runtime-compiled kernels use the device's
// own exp / erf / tanh, a few ulp from the host's.
constexpr double kTolerance = 2e-5;

void check_row(ActivationKind kind, const Shape& sizes, MemoryFormat format, Generator& gen) {
  const kernel::ActivationInfo& row = kernel::activation_info(kind);
  CAPTURE(row.name);
  CAPTURE(shape_str(sizes));
  CAPTURE(memory_format_name(format));
  Tensor x = mul(randn(sizes, {}, &gen), 3.0);
  if (row.cudnn_forward == kernel::CudnnActivation::ClippedRelu) {
    // Inputs exactly at the bounds too, where hardtanh_backward gives zero.
    x.flatten().slice(0, 0, 2).copy_(tensor({row.default_parameters[0], row.default_parameters[1]}, {2}));
  }
  x.requires_grad_(true);
  Tensor gx = x.detach().to(testing::test_gpu()).contiguous(format).requires_grad_(true);
  Tensor dy = randn(sizes, {}, &gen);
  Tensor y = activation(x, kind), gy = activation(gx, kind);
  CHECK(gy.device().is_cuda());
  CHECK_CLOSE(gy.cpu(), y, kTolerance, kTolerance);
  y.backward(dy);
  gy.backward(dy.to(testing::test_gpu()).contiguous(format));
  CHECK_CLOSE(gx.grad().cpu(), x.grad(), kTolerance, kTolerance);
}

}  // namespace

LOOM_GPU_TEST_CASE("every activation row matches the CPU on the GPU: kernel and cuDNN paths") {
  Generator gen(91);
  for (ActivationKind kind : kernel::kActivationKinds) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      check_row(kind, {2, 3, 4, 5}, format, gen);
      check_row(kind, {8, 64, 4, 4}, format, gen);
    }
  }
#ifdef LOOM_WITH_CUDA
  std::printf("%s", cudnn::PlanCache::global().explain().c_str());
#endif
}

LOOM_GPU_TEST_CASE("prelu matches the CPU on the GPU: one slope and one per channel, both layouts") {
  Generator gen(92);
  for (int64_t slopes : {1, 16}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      CAPTURE(slopes);
      CAPTURE(memory_format_name(format));
      const Tensor x = randn({4, 16, 5, 6}, {}, &gen), weight = rand({slopes}, {}, &gen) - 0.5;
      Tensor cx = x.clone().requires_grad_(true), cw = weight.clone().requires_grad_(true);
      Tensor gx = x.to(testing::test_gpu()).contiguous(format).requires_grad_(true);
      Tensor gw = weight.to(testing::test_gpu()).requires_grad_(true);
      const Tensor y = prelu(cx, cw), gy = prelu(gx, gw);
      CHECK(gy.device() == testing::test_gpu());
      CHECK_CLOSE(gy.cpu(), y, kTolerance, kTolerance);
      const Tensor dy = randn(x.sizes(), {}, &gen);
      y.backward(dy);
      gy.backward(dy.to(testing::test_gpu()));
      CHECK_CLOSE(gx.grad().cpu(), cx.grad(), kTolerance, kTolerance);
      CHECK_CLOSE(gw.grad().cpu(), cw.grad(), kTolerance, kTolerance);
    }
  }
}
