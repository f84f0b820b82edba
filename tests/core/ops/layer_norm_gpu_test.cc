// File: tests/core/ops/layer_norm_gpu_test.cc
// layer_norm on the GPU against the CPU's in float64 on the same values,
// forward and the gradients of x, weight and bias, over ranks, NCHW and
// channels-last, affine or not, float32 (cuDNN's layer-norm graphs where they
// have engines, Loom's kernels beneath), float64 and bfloat16 (Loom's kernels).
// Ends with the plan cache's listing.
// N batch, C channels, H, W.
#include <doctest/doctest.h>

#include "core/ops/ops.h"
#include "tests/testing.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/plan_cache.h"
#endif

using namespace loom;

namespace {

// Against float64: float32's row sums in float, bfloat16's rounding of its
// inputs, output and gradients.
double tolerance(DType dtype) {
  return dtype == DType::Float64 ? 1e-10 : dtype == DType::Float32 ? 1e-4 : 3e-2;
}

// x's values in `dtype` on the GPU and in float64 on the CPU, requiring grad.
struct Pair {
  Tensor gpu, cpu;
};

Pair pair_of(const Tensor& values, DType dtype, MemoryFormat format = MemoryFormat::Contiguous) {
  const Tensor rounded = values.to(dtype);
  return {rounded.to(testing::test_gpu()).contiguous(format).requires_grad_(true),
          rounded.to(DType::Float64).requires_grad_(true)};
}

}  // namespace

LOOM_GPU_TEST_CASE("layer_norm matches the CPU on the GPU, forward and backward") {
  Generator gen(93);
  const Tensor values = randn({4, 8, 5, 6}, {}, &gen);
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (int64_t k : {1, 3}) {
      const Shape shape(values.sizes().end() - k, values.sizes().end());
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        for (bool affine : {true, false}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(k);
          CAPTURE(memory_format_name(format));
          CAPTURE(affine);
          const Pair x = pair_of(values, dtype, format);
          Pair w, b;
          if (affine) {
            w = pair_of(randn(shape, {}, &gen), dtype);
            b = pair_of(randn(shape, {}, &gen), dtype);
          }
          Tensor gy = layer_norm(x.gpu, shape, w.gpu, b.gpu), cy = layer_norm(x.cpu, shape, w.cpu, b.cpu);
          CHECK(gy.device().is_cuda());
          CHECK(gy.dtype() == dtype);
          const double tol = tolerance(dtype);
          CHECK_CLOSE(gy.cpu().to(DType::Float64), cy, tol, tol);
          const Tensor dy = randn(values.sizes(), {}, &gen).to(dtype);
          gy.backward(dy.to(testing::test_gpu()));
          cy.backward(dy.to(DType::Float64));
          CHECK_CLOSE(x.gpu.grad().cpu().to(DType::Float64), x.cpu.grad(), tol, tol);
          if (affine) {
            CHECK_CLOSE(w.gpu.grad().cpu().to(DType::Float64), w.cpu.grad(), tol, tol);
            CHECK_CLOSE(b.gpu.grad().cpu().to(DType::Float64), b.cpu.grad(), tol, tol);
          }
        }
      }
    }
  }
#ifdef LOOM_WITH_CUDA
  MESSAGE(cudnn::PlanCache::global().explain());
#endif
}

// A half-precision model's activations beside float32 parameters: PyTorch's
// mixed-dtype layer norm computes in float32 and returns x's dtype.
LOOM_GPU_TEST_CASE("layer_norm of a 16-bit x with float32 weight and bias returns x's dtype") {
  Generator gen(94);
  for (DType half : {DType::BFloat16, DType::Float16}) {
    CAPTURE(dtype_name(half));
    const Pair x = pair_of(randn({3, 2, 8}, {}, &gen), half);
    const Pair w = pair_of(randn({8}, {}, &gen), DType::Float32), b = pair_of(randn({8}, {}, &gen), DType::Float32);
    const Tensor gy = layer_norm(x.gpu, {8}, w.gpu, b.gpu), cy = layer_norm(x.cpu, {8}, w.cpu, b.cpu);
    CHECK(gy.dtype() == half);
    CHECK(layer_norm(x.gpu, {8}, w.gpu, Tensor()).dtype() == half);
    CHECK(layer_norm(x.gpu, {8}, Tensor(), b.gpu).dtype() == half);
    const double tol = tolerance(half);
    CHECK_CLOSE(gy.cpu().to(DType::Float64), cy, tol, tol);
    const Tensor dy = randn({3, 2, 8}, {}, &gen).to(half);
    gy.backward(dy.to(testing::test_gpu()));
    cy.backward(dy.to(DType::Float64));
    CHECK(x.gpu.grad().dtype() == half);
    CHECK(w.gpu.grad().dtype() == DType::Float32);
    CHECK_CLOSE(x.gpu.grad().cpu().to(DType::Float64), x.cpu.grad(), tol, tol);
    CHECK_CLOSE(w.gpu.grad().cpu().to(DType::Float64), w.cpu.grad(), tol, tol);
    CHECK_CLOSE(b.gpu.grad().cpu().to(DType::Float64), b.cpu.grad(), tol, tol);
  }
}
