// File: tests/core/cuda/bf16_kernels_gpu_test.cc
// The CUDA kernels on bfloat16 (and float16) operands against the CPU reference
// kernels on float32 copies of the same, already rounded, values: elementwise,
// reductions, pooling, batch-norm inference and cuBLAS matmul, in NCHW,
// channels-last, sliced and permuted layouts, odd sizes and empty tensors.
// GPU outputs start as NaN, so an element a kernel fails to write shows up.
//
// Tolerances: the GPU computes in float32 like the CPU and rounds the result
// once to 8 significant bits (float16: 11), so results agree to one rounding:
// rtol 8e-3 (two bf16 ulps, for a rounding boundary the last fp32 bit moves),
// atol 1e-5 near zero. matmul sums K products in fp32 in a different order
// before rounding: rtol 1e-2, atol 1e-2.
//
// N batch, C channels, H, W input plane, P, Q output plane; M, K, N for matmul.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <functional>
#include <limits>
#include <vector>

#include "core/cpu/activation.h"
#include "core/cpu/elementwise.h"
#include "core/cpu/gemm.h"
#include "core/cpu/norm.h"
#include "core/cpu/pool.h"
#include "core/cpu/reduce.h"
#include "core/cuda/blas.h"
#include "core/cuda/elementwise.h"
#include "core/cuda/norm.h"
#include "core/cuda/pool.h"
#include "core/cuda/reduce.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kRtol = 8e-3, kAtol = 1e-5;
constexpr DType kHalves[] = {DType::BFloat16, DType::Float16};

// Values exactly representable in `half`, as float32 on the CPU.
Tensor rounded_randn(const Shape& sizes, DType half, Generator& gen, double shift = 0.0) {
  return add(randn(sizes, {}, &gen), shift).to(half).to(DType::Float32);
}

// The device copy of a CPU float32 tensor, stored as `half`.
Tensor on_gpu(const Tensor& cpu, DType half) { return cpu.to(testing::test_gpu()).to(half); }

// A dense output of `sizes` in `half` on the GPU, poisoned with NaN.
Tensor poisoned(const Shape& sizes, DType half, MemoryFormat format = MemoryFormat::Contiguous) {
  return empty(sizes, {.dtype = half, .device = testing::test_gpu(), .memory_format = format}).fill_(kNaN);
}

struct Layout {
  const char* name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};

// Each gives a (2, 3, 5, 7) view, applied alike to the CPU and GPU copies.
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"nchw", {2, 3, 5, 7}, [](const Tensor& t) { return t; }},
      {"channels_last", {2, 3, 5, 7},
       [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
      {"sliced", {2, 3, 10, 9}, [](const Tensor& t) { return t.slice(2, 1, 10, 2).slice(3, 1, 8); }},
      {"permuted", {7, 5, 3, 2}, [](const Tensor& t) { return t.permute({3, 2, 1, 0}); }},
  };
  return all;
}

}  // namespace

LOOM_GPU_TEST_CASE("bf16 kernels: unary and binary elementwise over every layout") {
  using kernel::ActivationKind;
  using kernel::BinaryOp;
  using kernel::UnaryOp;
  Generator gen(71);
  for (DType half : kHalves) {
    for (const Layout& layout : layouts()) {
      CAPTURE(dtype_name(half));
      CAPTURE(layout.name);
      Tensor a_base = rounded_randn(layout.base, half, gen, 2.0);
      Tensor b_base = rounded_randn(layout.base, half, gen);
      Tensor a = layout.view(a_base), ag = layout.view(on_gpu(a_base, half));
      Tensor b = layout.view(b_base), bg = layout.view(on_gpu(b_base, half));
      for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Exp}) {
        CAPTURE(static_cast<int>(op));
        Tensor ref = empty(a.sizes()), out = poisoned(a.sizes(), half);
        cpu::unary(ref.strided(), a.strided(), op);
        cuda::unary(out.strided(), ag.strided(), op);
        CHECK_CLOSE(out.to(DType::Float32).cpu(), ref, kRtol, kAtol);
      }
      for (ActivationKind kind : {ActivationKind::Relu, ActivationKind::Sigmoid, ActivationKind::Tanh,
                                  ActivationKind::Gelu, ActivationKind::Silu}) {
        CAPTURE(kernel::activation_info(kind).name);
        const kernel::ActivationParameters scalars = kernel::activation_info(kind).default_parameters;
        Tensor ref = empty(a.sizes()), out = poisoned(a.sizes(), half);
        cpu::activation_forward(ref.strided(), a.strided(), kind, scalars);
        cuda::activation_forward(out.strided(), ag.strided(), kind, scalars);
        CHECK_CLOSE(out.to(DType::Float32).cpu(), ref, kRtol, kAtol);
        if (kind != ActivationKind::Relu && kind != ActivationKind::Gelu) continue;
        cpu::activation_backward(ref.strided(), b.strided(), a.strided(), kind, scalars);
        cuda::activation_backward(out.strided(), bg.strided(), ag.strided(), kind, scalars);
        CHECK_CLOSE(out.to(DType::Float32).cpu(), ref, kRtol, kAtol);
      }
      for (BinaryOp op : {BinaryOp::Add, BinaryOp::Mul, BinaryOp::Div}) {
        CAPTURE(static_cast<int>(op));
        Tensor ref = empty(a.sizes()), out = poisoned(a.sizes(), half);
        cpu::binary(ref.strided(), b.strided(), a.strided(), op);
        cuda::binary(out.strided(), bg.strided(), ag.strided(), op);
        CHECK_CLOSE(out.to(DType::Float32).cpu(), ref, kRtol, kAtol);
      }
      Tensor ref = empty(a.sizes()), out = poisoned(a.sizes(), half);
      cpu::add_scaled(ref.strided(), a.strided(), b.strided(), -0.5);
      cuda::add_scaled(out.strided(), ag.strided(), bg.strided(), -0.5);
      CHECK_CLOSE(out.to(DType::Float32).cpu(), ref, kRtol, kAtol);
    }
  }
}

LOOM_GPU_TEST_CASE("bf16 kernels: odd sizes and empty tensors") {
  Generator gen(72);
  for (int64_t n : {0, 1, 7, 1000003}) {
    CAPTURE(n);
    Tensor x = rounded_randn({n}, DType::BFloat16, gen);
    Tensor ref = empty({n}), out = poisoned({n}, DType::BFloat16);
    cpu::clamp(ref.strided(), x.strided(), -0.5, 0.75);
    cuda::clamp(out.strided(), on_gpu(x, DType::BFloat16).strided(), -0.5, 0.75);
    CHECK_CLOSE(out.to(DType::Float32).cpu(), ref, 0.0, 0.0);  // a selection: exact
    Tensor total = poisoned({1}, DType::BFloat16), total_ref = empty({1});
    cpu::reduce(total_ref.strided(), x.strided(), kernel::ReduceOp::Sum);
    cuda::reduce(total.strided(), on_gpu(x, DType::BFloat16).strided(), kernel::ReduceOp::Sum);
    // fp32 partial sums in another order, then one rounding of a sum of up to 1e6 terms.
    CHECK_CLOSE(total.to(DType::Float32).cpu(), total_ref, kRtol, 2e-2);
  }
}

LOOM_GPU_TEST_CASE("bf16 kernels: reductions accumulate in fp32 over every layout") {
  Generator gen(73);
  for (const Layout& layout : layouts()) {
    CAPTURE(layout.name);
    Tensor base = rounded_randn(layout.base, DType::BFloat16, gen);
    Tensor x = layout.view(base), xg = layout.view(on_gpu(base, DType::BFloat16));
    for (kernel::ReduceOp op : {kernel::ReduceOp::Sum, kernel::ReduceOp::Mean, kernel::ReduceOp::Max}) {
      CAPTURE(static_cast<int>(op));
      for (const Shape& keep : {Shape{1, 3, 1, 1}, Shape{2, 1, 5, 7}, Shape{1, 1, 1, 1}}) {
        Tensor ref = empty(keep), out = poisoned(keep, DType::BFloat16);
        cpu::reduce(ref.strided(), x.strided(), op);
        cuda::reduce(out.strided(), xg.strided(), op);
        CHECK_CLOSE(out.to(DType::Float32).cpu(), ref, kRtol, 1e-3);
      }
    }
    Shape keep = {2, 3, 5, 1};
    Tensor values = poisoned(keep, DType::BFloat16), values_ref = empty(keep);
    Tensor indices = empty(keep, {.dtype = DType::Int64, .device = testing::test_gpu()});
    Tensor indices_ref = empty(keep, {.dtype = DType::Int64});
    cpu::max_along(values_ref.strided(), indices_ref.strided(), x.strided(), 3);
    cuda::max_along(values.strided(), indices.strided(), xg.strided(), 3);
    CHECK_CLOSE(values.to(DType::Float32).cpu(), values_ref, 0.0, 0.0);
    CHECK(indices.cpu().to_vector<int64_t>() == indices_ref.to_vector<int64_t>());
  }
}

LOOM_GPU_TEST_CASE("bf16 kernels: pooling and batch-norm inference, NCHW and channels-last") {
  Generator gen(74);
  const kernel::Pool2dParams params{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2,
                                 .pad_h = 1, .pad_w = 1};
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    CAPTURE(memory_format_name(format));
    // x (N, C, H, W) = (2, 8, 9, 9) -> y (2, 8, 5, 5)
    Tensor x = rounded_randn({2, 8, 9, 9}, DType::BFloat16, gen).contiguous(format);
    Tensor xg = on_gpu(x, DType::BFloat16);
    const Shape y_sizes = {2, 8, 5, 5};
    Tensor y = poisoned(y_sizes, DType::BFloat16, format), y_ref = empty(y_sizes);
    Tensor idx = empty(y_sizes, {.dtype = DType::Int64, .device = testing::test_gpu()});
    Tensor idx_ref = empty(y_sizes, {.dtype = DType::Int64});
    cpu::max_pool2d_forward(y_ref.strided(), idx_ref.strided(), x.strided(), params);
    cuda::max_pool2d_forward(y.strided(), idx.strided(), xg.strided(), params);
    CHECK_CLOSE(y.to(DType::Float32).cpu(), y_ref, 0.0, 0.0);
    Tensor dy = rounded_randn(y_sizes, DType::BFloat16, gen);
    Tensor dx = poisoned(x.sizes(), DType::BFloat16, format), dx_ref = empty(x.sizes());
    cpu::max_pool2d_backward(dx_ref.strided(), dy.strided(), idx_ref.strided());
    cuda::max_pool2d_backward(dx.strided(), on_gpu(dy, DType::BFloat16).strided(), idx.strided(), params);
    CHECK_CLOSE(dx.to(DType::Float32).cpu(), dx_ref, kRtol, kAtol);
    Tensor avg = poisoned(y_sizes, DType::BFloat16, format), avg_ref = empty(y_sizes);
    const kernel::Pool2dParams exclude_pad{3, 3, 2, 2, 1, 1, /*max=*/false, /*count_include_pad=*/false};
    cpu::avg_pool2d_forward(avg_ref.strided(), x.strided(), exclude_pad);
    cuda::avg_pool2d_forward(avg.strided(), xg.strided(), exclude_pad);
    CHECK_CLOSE(avg.to(DType::Float32).cpu(), avg_ref, kRtol, kAtol);

    // bf16 x and y, fp32 per-channel statistics and affine parameters.
    Tensor mean = randn({8}, {}, &gen), invstd = add(rand({8}, {}, &gen), 0.5);
    Tensor w = randn({8}, {}, &gen), b = randn({8}, {}, &gen);
    Tensor bn = poisoned(x.sizes(), DType::BFloat16, format), bn_ref = empty(x.sizes());
    cpu::batch_norm_forward(bn_ref.strided(), x.strided(), mean.strided(), invstd.strided(),
                            w.strided(), b.strided());
    auto gpu = [](const Tensor& t) { return t.to(testing::test_gpu()); };
    cuda::batch_norm_forward(bn.strided(), xg.strided(), gpu(mean).strided(),
                             gpu(invstd).strided(), gpu(w).strided(), gpu(b).strided());
    CHECK_CLOSE(bn.to(DType::Float32).cpu(), bn_ref, kRtol, 1e-4);
  }
}

LOOM_GPU_TEST_CASE("bf16 kernels: cuBLAS matmul, plain, transposed and batched") {
  Generator gen(75);
  for (DType half : kHalves) {
    CAPTURE(dtype_name(half));
    // a (3, M, K) = (3, 17, 40), b (K, N) = (40, 9) broadcast over the batch
    Tensor a = rounded_randn({3, 17, 40}, half, gen), b = rounded_randn({40, 9}, half, gen);
    Tensor ag = on_gpu(a, half), bg = on_gpu(b, half);
    Tensor c = poisoned({3, 17, 9}, half), c_ref = empty({3, 17, 9});
    Strided b_batched = b.strided(), bg_batched = bg.strided();
    for (Strided* s : {&b_batched, &bg_batched}) {
      s->sizes.insert(s->sizes.begin(), 3);
      s->strides.insert(s->strides.begin(), 0);
    }
    cpu::matmul(c_ref.strided(), a.strided(), b_batched);
    cuda::matmul(c.strided(), ag.strided(), bg_batched);
    CHECK_CLOSE(c.to(DType::Float32).cpu(), c_ref, 1e-2, 1e-2);
    // c2 (K, K) = a[0]^T (K, M) . a[1] (M, K), a[0]^T as a transposed view
    Tensor c2 = poisoned({40, 40}, half), c2_ref = empty({40, 40});
    cpu::matmul(c2_ref.strided(), cpu::transpose_last(a.select(0, 0).strided()), a.select(0, 1).strided());
    cuda::matmul(c2.strided(), cpu::transpose_last(ag.select(0, 0).strided()), ag.select(0, 1).strided());
    CHECK_CLOSE(c2.to(DType::Float32).cpu(), c2_ref, 1e-2, 1e-2);
  }
}

#endif  // LOOM_WITH_CUDA
