// File: tests/core/ops/layer_norm_gpu_test.cc
// layer_norm on the GPU against the CPU reference, forward and the gradients of
// x, weight and bias, over ranks, NCHW and channels-last, affine or not
// (float32 affine runs cuDNN's layer-norm graphs where they have engines, the
// rest the composite of ops). Ends with the plan cache's listing.
// N batch, C channels, H, W.
#include <doctest/doctest.h>

#include "core/ops/ops.h"
#include "tests/testing.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/plan_cache.h"
#endif

using namespace loom;

LOOM_GPU_TEST_CASE("layer_norm matches the CPU on the GPU, forward and backward") {
  Generator gen(93);
  const Tensor x = randn({4, 8, 5, 6}, {}, &gen);
  for (int64_t k : {1, 3}) {
    const Shape shape(x.sizes().end() - k, x.sizes().end());
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (bool affine : {true, false}) {
        CAPTURE(k);
        CAPTURE(memory_format_name(format));
        CAPTURE(affine);
        Tensor cx = x.detach().requires_grad_(true);
        Tensor gx = x.to(testing::test_gpu()).contiguous(format).requires_grad_(true);
        Tensor cw, cb, gw, gb;
        if (affine) {
          cw = randn(shape, {}, &gen).requires_grad_(true);
          cb = randn(shape, {}, &gen).requires_grad_(true);
          gw = cw.detach().to(testing::test_gpu()).requires_grad_(true);
          gb = cb.detach().to(testing::test_gpu()).requires_grad_(true);
        }
        Tensor cy = layer_norm(cx, shape, cw, cb), gy = layer_norm(gx, shape, gw, gb);
        CHECK(gy.device().is_cuda());
        CHECK_CLOSE(gy.cpu(), cy, 1e-5, 1e-5);
        const Tensor dy = randn(x.sizes(), {}, &gen);
        cy.backward(dy);
        gy.backward(dy.to(testing::test_gpu()));
        CHECK_CLOSE(gx.grad().cpu(), cx.grad(), 1e-4, 1e-4);
        if (affine) {
          CHECK_CLOSE(gw.grad().cpu(), cw.grad(), 1e-4, 1e-4);
          CHECK_CLOSE(gb.grad().cpu(), cb.grad(), 1e-4, 1e-4);
        }
      }
    }
  }
#ifdef LOOM_WITH_CUDA
  MESSAGE(cudnn::PlanCache::global().explain());
#endif
}
