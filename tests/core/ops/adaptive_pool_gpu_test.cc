// File: tests/core/ops/adaptive_pool_gpu_test.cc
// adaptive_avg_pool2d and adaptive_max_pool2d on the GPU against the CPU,
// forward and backward, NCHW and channels-last, output sizes that divide the
// input and ones that do not.
// N batch, C channels, H, W input.
#include <doctest/doctest.h>

#include <utility>

#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

LOOM_GPU_TEST_CASE("adaptive_avg_pool2d matches the CPU on the GPU, forward and backward") {
  Generator gen(94);
  for (auto [p, q] : {std::pair<int64_t, int64_t>{3, 4}, {2, 5}, {1, 1}}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      CAPTURE(p);
      CAPTURE(q);
      CAPTURE(memory_format_name(format));
      Tensor x = randn({2, 8, 9, 8}, {}, &gen).requires_grad_(true);
      Tensor gx = x.detach().to(testing::test_gpu()).contiguous(format).requires_grad_(true);
      Tensor y = adaptive_avg_pool2d(x, {p, q}), gy = adaptive_avg_pool2d(gx, {p, q});
      CHECK(gy.device().is_cuda());
      CHECK_CLOSE(gy.cpu(), y, 1e-5, 1e-5);
      const Tensor dy = randn(y.sizes(), {}, &gen);
      y.backward(dy);
      gy.backward(dy.to(testing::test_gpu()));
      CHECK_CLOSE(gx.grad().cpu(), x.grad(), 1e-5, 1e-5);
    }
  }
}

LOOM_GPU_TEST_CASE("adaptive_max_pool2d matches the CPU on the GPU, forward and backward") {
  Generator gen(95);
  for (auto [p, q] : {std::pair<int64_t, int64_t>{3, 4}, {2, 5}, {3, 2}, {1, 1}, {10, 9}}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      CAPTURE(p);
      CAPTURE(q);
      CAPTURE(memory_format_name(format));
      // Continuous random values: each cell's maximum is unique, so both devices
      // send its gradient to the same element.
      Tensor x = randn({2, 7, 9, 8}, {}, &gen).requires_grad_(true);
      Tensor gx = x.detach().to(testing::test_gpu()).contiguous(format).requires_grad_(true);
      Tensor y = adaptive_max_pool2d(x, {p, q}), gy = adaptive_max_pool2d(gx, {p, q});
      CHECK(gy.device().is_cuda());
      CHECK_CLOSE(gy.cpu(), y, 0, 0);
      const Tensor dy = randn(y.sizes(), {}, &gen);
      y.backward(dy);
      gy.backward(dy.to(testing::test_gpu()));
      CHECK_CLOSE(gx.grad().cpu(), x.grad(), 1e-6, 1e-6);
    }
  }
}
