// File: tests/core/cudnn/pointwise_gpu_test.cc
// Every activation row with a cuDNN pointwise mode, forward and backward as
// cuDNN graphs, against the CPU kernels of the same row. ReLU must have an
// engine (it always had), and so must ReLU6 (RELU with an upper clip: it
// fuses as ReLU does); a row without one is reported, and the op runs
// Loom's kernel for it (tests/core/ops/activation_gpu_test.cc checks that path).
#include <doctest/doctest.h>

#include <cmath>

#ifdef LOOM_WITH_CUDA
#include "core/cpu/activation.h"
#include "core/cudnn/pointwise.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// ReLU and the clipped rows are exact; the other modes use the device's exp / erf / tanh.
double tolerance(kernel::ActivationKind kind) {
  const bool exact = kind == kernel::ActivationKind::Relu || kind == kernel::ActivationKind::Relu6 ||
                     kind == kernel::ActivationKind::Hardtanh;
  return exact ? 0 : 2e-5;
}

}  // namespace

LOOM_GPU_TEST_CASE("cuDNN activation graphs forward and backward match the CPU kernels") {
  Generator gen(41);
  const Shape shapes[] = {{8, 16, 4, 4}, {4, 64}, {2, 3, 8, 8}};
  for (kernel::ActivationKind kind : kernel::kActivationKinds) {
    const kernel::ActivationInfo& row = kernel::activation_info(kind);
    // Non-default scalars where the row takes them (Hardtanh's bounds become -0.7 and 0.7).
    kernel::ActivationParameters parameter = row.default_parameters;
    for (int i = 0; i < kernel::parameter_count(row); ++i) {
      parameter[i] = parameter[i] == 0 ? 0.2 : 0.7 * parameter[i];
    }
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (const Shape& s : shapes) {
        if (format == MemoryFormat::ChannelsLast && s.size() != 4) continue;
        CAPTURE(row.name);
        CAPTURE(shape_str(s));
        Tensor x = mul(randn(s, {}, &gen), 3.0), dy = randn(s, {}, &gen);
        if (row.cudnn_forward == kernel::CudnnActivation::ClippedRelu) {
          // Some inputs exactly at the bounds, where the gradient is zero (hardtanh_backward).
          x.flatten().slice(0, 0, 2).copy_(tensor({parameter[0], parameter[1]}, {2}));
        }
        Tensor y_ref = empty(s), dx_ref = empty(s);
        cpu::activation_forward(y_ref.strided(), x.strided(), kind, parameter);
        const Tensor& saved_ref = row.saved == kernel::Saved::Output ? y_ref : x;
        cpu::activation_backward(dx_ref.strided(), dy.strided(), saved_ref.strided(), kind, parameter);
        Tensor gx = x.to(testing::test_gpu()).contiguous(format), gdy = dy.to(testing::test_gpu()).contiguous(format);
        Tensor gy = full(s, NAN, {.device = testing::test_gpu(), .memory_format = format});
        Tensor gdx = full(s, NAN, {.device = testing::test_gpu(), .memory_format = format});
        const bool forward = cudnn::activation_forward(kind, parameter, gy.strided(), gx.strided());
        if (kind == kernel::ActivationKind::Relu || kind == kernel::ActivationKind::Relu6) CHECK(forward);
        if (row.cudnn_forward != kernel::CudnnActivation::None && !forward) MESSAGE("no cuDNN forward engine");
        if (forward) CHECK_CLOSE(gy.cpu(), y_ref, tolerance(kind), tolerance(kind));
        const Tensor saved = row.saved == kernel::Saved::Output ? y_ref.to(testing::test_gpu()).contiguous(format) : gx;
        const bool backward = cudnn::activation_backward(kind, parameter, gdx.strided(), gdy.strided(), saved.strided());
        if (kind == kernel::ActivationKind::Relu || kind == kernel::ActivationKind::Relu6) CHECK(backward);
        if (row.cudnn_backward != kernel::CudnnActivation::None && !backward) MESSAGE("no cuDNN backward engine");
        if (backward) CHECK_CLOSE(gdx.cpu(), dx_ref, tolerance(kind), tolerance(kind));
      }
    }
  }
}

LOOM_GPU_TEST_CASE("a size the packed view cannot hold, or a row without a cuDNN mode, is declined") {
  Tensor x = ones({7, 3}, {.device = testing::test_gpu()}), y = empty({7, 3}, {.device = testing::test_gpu()});
  CHECK_FALSE(cudnn::activation_forward(kernel::ActivationKind::Relu, {0, 0}, y.strided(), x.strided()));
  Tensor x64 = ones({4, 64}, {.device = testing::test_gpu()}), y64 = empty({4, 64}, {.device = testing::test_gpu()});
  CHECK_FALSE(cudnn::activation_backward(kernel::ActivationKind::Sigmoid, {0, 0}, y64.strided(), x64.strided(),
                                         x64.strided()));
}
#endif  // LOOM_WITH_CUDA
