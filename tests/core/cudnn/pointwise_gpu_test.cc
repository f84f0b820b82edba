// File: tests/core/cudnn/pointwise_gpu_test.cc
// ReLU forward and backward as cuDNN pointwise graphs against the CPU kernels.
#include <doctest/doctest.h>

#include <cmath>

#ifdef LOOM_WITH_CUDA
#include "core/cpu/elementwise.h"
#include "core/cudnn/pointwise.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

LOOM_GPU_TEST_CASE("cuDNN ReLU forward and backward match the CPU kernels") {
  Generator gen(41);
  const Shape shapes[] = {{8, 16, 4, 4}, {4, 64}, {2, 3, 8, 8}};
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (const Shape& s : shapes) {
      if (format == MemoryFormat::ChannelsLast && s.size() != 4) continue;
      CAPTURE(shape_str(s));
      Tensor x = randn(s, {}, &gen), dy = randn(s, {}, &gen);
      Tensor y_ref = empty(s), dx_ref = empty(s);
      cpu::unary(y_ref.strided(), x.strided(), cpu::UnaryOp::Relu);
      cpu::binary(dx_ref.strided(), dy.strided(), y_ref.strided(), cpu::BinaryOp::ReluBackward);
      Tensor gx = x.to(Device::cuda()).contiguous(format), gdy = dy.to(Device::cuda()).contiguous(format);
      Tensor gy = full(s, NAN, {.device = Device::cuda(), .memory_format = format});
      Tensor gdx = full(s, NAN, {.device = Device::cuda(), .memory_format = format});
      REQUIRE(cudnn::relu_forward(gy.strided(), gx.strided()));
      CHECK_CLOSE(gy.cpu(), y_ref, 0, 0);
      REQUIRE(cudnn::relu_backward(gdx.strided(), gdy.strided(), gy.strided()));
      CHECK_CLOSE(gdx.cpu(), dx_ref, 0, 0);
    }
  }
}

LOOM_GPU_TEST_CASE("ReLU on a size the packed view cannot hold is declined") {
  Tensor x = ones({7, 3}, {.device = Device::cuda()}), y = empty({7, 3}, {.device = Device::cuda()});
  CHECK_FALSE(cudnn::relu_forward(y.strided(), x.strided()));
}
#endif  // LOOM_WITH_CUDA
