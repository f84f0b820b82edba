// File: tests/core/ops/group_norm_gpu_test.cc
// group_norm and instance_norm on the GPU against the float64 CPU reference on
// seeded random configurations: forward and the gradients of x, weight and
// bias, NCHW and channels-last, float32 and bfloat16 x (float32 weight and bias,
// as autocast keeps them), affine or not, instance norm with running statistics
// or without. A float32 x runs cuDNN's layer-norm graph over each group's rows
// where it has an engine, the rest Loom's row kernels (core/cuda/layer_norm.h).
// Ends with the plan cache's listing. Reproducible by case number.
// N batch, C channels, H, W, G groups.
#include <doctest/doctest.h>

#include <random>

#include "core/ops/ops.h"
#include "tests/testing.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/plan_cache.h"
#endif

using namespace loom;

namespace {

struct NormCase {
  Shape sizes;
  int64_t groups = 1;
  bool instance = false, affine = true, channels_last = false, bf16 = false, track = false;
};

NormCase draw_case(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  NormCase c;
  c.instance = pick(0, 1) == 1;
  c.groups = c.instance ? 1 : pick(1, 8);
  const int64_t channels = c.instance ? pick(1, 40) : c.groups * pick(1, 9);
  c.sizes = {pick(1, 4), channels, pick(2, 17), pick(2, 17)};
  c.affine = pick(0, 3) > 0;
  c.channels_last = pick(0, 1) == 1;
  c.bf16 = pick(0, 2) == 0;
  c.track = c.instance && pick(0, 1) == 1;
  return c;
}

Tensor run(const NormCase& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm,
           const Tensor& rv) {
  return c.instance ? instance_norm(x, rm, rv, w, b) : group_norm(x, c.groups, w, b);
}

}  // namespace

LOOM_GPU_TEST_CASE("group_norm and instance_norm match the CPU on the GPU: random configurations") {
  std::mt19937 rng(3636);
  Generator gen(3636);
  for (int k = 0; k < 60; ++k) {
    const NormCase c = draw_case(rng);
    CAPTURE(k);
    CAPTURE(shape_str(c.sizes));
    CAPTURE(c.groups);
    CAPTURE(c.instance);
    CAPTURE(c.bf16);
    CAPTURE(c.channels_last);
    const Device gpu = testing::test_gpu();
    const int64_t ch = c.sizes[1];
    const DType dtype = c.bf16 ? DType::BFloat16 : DType::Float32;
    // bfloat16 x is rounded first, so both sides normalize the same values.
    const Tensor x64 = randn(c.sizes, {}, &gen).to(dtype).to(DType::Float64);
    Tensor cx = x64.detach().requires_grad_(true);
    Tensor gx = x64.to(dtype).to(gpu).contiguous(c.channels_last ? MemoryFormat::ChannelsLast
                                                                  : MemoryFormat::Contiguous);
    gx.requires_grad_(true);
    Tensor cw, cb, gw, gb;
    if (c.affine) {
      cw = randn({ch}, {.dtype = DType::Float64}, &gen).requires_grad_(true);
      cb = randn({ch}, {.dtype = DType::Float64}, &gen).requires_grad_(true);
      gw = cw.detach().to(DType::Float32).to(gpu).requires_grad_(true);
      gb = cb.detach().to(DType::Float32).to(gpu).requires_grad_(true);
    }
    Tensor crm, crv, grm, grv;
    if (c.track) {
      crm = zeros({ch}, {.dtype = DType::Float64}), crv = ones({ch}, {.dtype = DType::Float64});
      grm = zeros({ch}).to(gpu), grv = ones({ch}).to(gpu);
    }
    const Tensor cy = run(c, cx, cw, cb, crm, crv), gy = run(c, gx, gw, gb, grm, grv);
    CHECK(gy.device().is_cuda());
    CHECK(gy.dtype() == dtype);
    const double tol = c.bf16 ? 3e-2 : 1e-4;
    CHECK_CLOSE(gy.to(DType::Float64).cpu(), cy, tol, tol);
    if (c.track) {
      CHECK_CLOSE(grm.to(DType::Float64).cpu(), crm, tol, tol);
      CHECK_CLOSE(grv.to(DType::Float64).cpu(), crv, tol, tol);
    }
    const Tensor dy = randn(c.sizes, {.dtype = DType::Float64}, &gen);
    cy.backward(dy);
    gy.backward(dy.to(dtype).to(gpu));
    // Gradients against their own scale: dx of a bfloat16 run carries its rounding.
    CHECK_CLOSE(gx.grad().to(DType::Float64).cpu(), cx.grad(), c.bf16 ? 1e-1 : 1e-3, c.bf16 ? 1e-1 : 1e-3);
    if (c.affine) {
      CHECK_CLOSE(gw.grad().to(DType::Float64).cpu(), cw.grad(), c.bf16 ? 1e-1 : 1e-3, c.bf16 ? 1e-1 : 1e-3);
      CHECK_CLOSE(gb.grad().to(DType::Float64).cpu(), cb.grad(), c.bf16 ? 1e-1 : 1e-3, c.bf16 ? 1e-1 : 1e-3);
    }
  }
#ifdef LOOM_WITH_CUDA
  MESSAGE(cudnn::PlanCache::global().explain());
#endif
}
