// File: tests/core/cudnn/engine_sweep_gpu_test.cc
// For a few configs of the batch-norm, pooling and pointwise graph kinds, every
// engine config cuDNN reports as working (heuristics A and FALLBACK) gives a
// result within tolerance of the CPU reference, not just the one the plan
// cache would pick. (conv_gpu_test.cc sweeps the three convolution kinds.)
//
// N batch, C channels, H, W input, P, Q output.
#include <doctest/doctest.h>

#include <cmath>

#ifdef LOOM_WITH_CUDA
#include "core/cpu/activation.h"
#include "core/cpu/elementwise.h"
#include "core/cpu/norm.h"
#include "core/cpu/pool.h"
#include "core/cudnn/context.h"
#include "core/cudnn/norm.h"
#include "core/cudnn/pointwise.h"
#include "core/cudnn/pool.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

Tensor gpu(const Tensor& t, MemoryFormat format = MemoryFormat::Contiguous) {
  return t.to(testing::test_gpu()).contiguous(format);
}

Tensor gpu_nan(const Shape& s, MemoryFormat format = MemoryFormat::Contiguous, DType dtype = DType::Float32) {
  Tensor t = empty(s, {.dtype = dtype, .device = testing::test_gpu(), .memory_format = format});
  if (dtype == DType::Float32) t.fill_(NAN);
  return t;
}

void run(const cudnn::Plan& plan, const cudnn::VariantPointers& pointers) {
  const cudnn::Workspace workspace(static_cast<size_t>(plan.workspace_bytes()));
  plan.execute(cudnn::handle(), pointers, workspace.get());
}

}  // namespace

LOOM_GPU_TEST_CASE("every batch-norm engine config gives the reference result") {
  Generator gen(81);
  const double eps = 1e-5, momentum = 0.1;
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (const Shape& s : {Shape{4, 8, 5, 5}, Shape{2, 32, 6, 6}}) {
      const int64_t c = s[1];
      Tensor x = randn(s, {}, &gen), w = add(rand({c}, {}, &gen), 0.5), b = randn({c}, {}, &gen);
      Tensor dy = randn(s, {}, &gen);
      Tensor mean_ref = empty({c}), invstd_ref = empty({c}), y_ref = empty(s);
      Tensor rm_ref = zeros({c}), rv_ref = ones({c});
      cpu::batch_norm_batch_stats(mean_ref.strided(), invstd_ref.strided(), x.strided(), eps,
                                  kernel::RunningStats{rm_ref.strided(), rv_ref.strided(), momentum});
      cpu::batch_norm_forward(y_ref.strided(), x.strided(), mean_ref.strided(), invstd_ref.strided(),
                              w.strided(), b.strided());
      Tensor dx_ref = empty(s), dw_ref = empty({c}), db_ref = empty({c});
      cpu::batch_norm_backward(dx_ref.strided(), dw_ref.strided(), db_ref.strided(), dy.strided(),
                               x.strided(), mean_ref.strided(), invstd_ref.strided(), w.strided(), true);

      Tensor gx = gpu(x, format), gw = gpu(w), gb = gpu(b), gy = gpu_nan(s, format);
      Tensor grm = zeros({c}, {.device = testing::test_gpu()}), grv = ones({c}, {.device = testing::test_gpu()});
      Tensor gmean = gpu_nan({c}), ginvstd = gpu_nan({c});
      cudnn::BatchNormTrainingArgs fwd{gy.strided(), gmean.strided(), ginvstd.strided(), gx.strided(),
                                       gw.strided(), gb.strided(), grm.strided(), grv.strided(), eps, momentum};
      cudnn::BatchNormScalars scalars(fwd);
      auto plans = cudnn::all_working_plans(cudnn::batch_norm_forward_graph(fwd), cudnn::handle());
      CHECK(!plans.empty());
      for (const auto& plan : plans) {
        CAPTURE(plan->notes().engine_id);
        CAPTURE(memory_format_name(format));
        gy.fill_(NAN);
        grm.fill_(0.0);
        grv.fill_(1.0);
        run(*plan, cudnn::batch_norm_forward_pointers(fwd, scalars));
        CHECK_CLOSE(gy.cpu(), y_ref, 1e-4, 1e-5);
        CHECK_CLOSE(grm.cpu(), rm_ref, 1e-4, 1e-5);
        CHECK_CLOSE(grv.cpu(), rv_ref, 1e-4, 1e-5);
      }
      Tensor gdy = gpu(dy, format), gdx = gpu_nan(s, format), gdw = gpu_nan({c}), gdb = gpu_nan({c});
      cudnn::BatchNormBackwardArgs bwd{gdx.strided(), gdw.strided(), gdb.strided(), gdy.strided(),
                                       gx.strided(), gw.strided(), gmean.strided(), ginvstd.strided()};
      auto bwd_plans = cudnn::all_working_plans(cudnn::batch_norm_backward_graph(bwd), cudnn::handle());
      CHECK(!bwd_plans.empty());
      for (const auto& plan : bwd_plans) {
        CAPTURE(plan->notes().engine_id);
        gdx.fill_(NAN);
        run(*plan, cudnn::batch_norm_backward_pointers(bwd));
        CHECK_CLOSE(gdx.cpu(), dx_ref, 1e-3, 1e-4);
        CHECK_CLOSE(gdw.cpu(), dw_ref, 1e-3, 1e-4);
        CHECK_CLOSE(gdb.cpu(), db_ref, 1e-3, 1e-4);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("every pooling engine config gives the reference result") {
  Generator gen(82);
  const kernel::Pool2dParams p{3, 3, 2, 2, 1, 1, /*max=*/false, /*count_include_pad=*/true};
  const Shape xs{2, 8, 9, 9}, ys{2, 8, 5, 5};
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (bool max : {true, false}) {
      CAPTURE(memory_format_name(format));
      CAPTURE(max);
      Tensor x = randn(xs, {}, &gen), dy = randn(ys, {}, &gen);
      Tensor y_ref = empty(ys), dx_ref = empty(xs), idx = empty(ys, {.dtype = DType::Int64});
      if (max) {
        cpu::max_pool2d_forward(y_ref.strided(), idx.strided(), x.strided(), p);
        cpu::max_pool2d_backward(dx_ref.strided(), dy.strided(), idx.strided());
      } else {
        cpu::avg_pool2d_forward(y_ref.strided(), x.strided(), p);
        cpu::avg_pool2d_backward(dx_ref.strided(), dy.strided(), p);
      }
      const kernel::Pool2dParams args{3, 3, 2, 2, 1, 1, max, /*count_include_pad=*/true};
      Tensor gx = gpu(x, format), gy = gpu_nan(ys, format), gdy = gpu(dy, format), gdx = gpu_nan(xs, format);
      bool indexed = max && cudnn::pool_uses_index(gx.strided());
      Tensor index = indexed ? gpu_nan(ys, format, DType::UInt8) : Tensor();
      Strided iv = indexed ? index.strided() : Strided{}, xv = gx.strided(), yv = gy.strided();
      const Strided* ip = indexed ? &iv : nullptr;
      auto plans = cudnn::all_working_plans(cudnn::pool2d_forward_graph(gy.strided(), ip, gx.strided(), args),
                                            cudnn::handle());
      CHECK(!plans.empty());
      for (const auto& plan : plans) {
        CAPTURE(plan->notes().engine_id);
        gy.fill_(NAN);
        run(*plan, cudnn::pool2d_forward_pointers(gy.strided(), ip, gx.strided()));
        CHECK_CLOSE(gy.cpu(), y_ref, 1e-5, 1e-6);
      }
      REQUIRE(cudnn::pool2d_forward(gy.strided(), ip, gx.strided(), args));  // index from the cached plan
      cudnn::PoolBackwardInputs saved;
      if (indexed) saved.index = &iv;
      if (format == MemoryFormat::Contiguous) saved.x = &xv, saved.y = &yv;
      auto bwd = cudnn::all_working_plans(cudnn::pool2d_backward_graph(gdx.strided(), gdy.strided(), saved, args),
                                          cudnn::handle());
      CHECK(!bwd.empty());
      for (const auto& plan : bwd) {
        CAPTURE(plan->notes().engine_id);
        gdx.fill_(NAN);
        run(*plan, cudnn::pool2d_backward_pointers(gdx.strided(), gdy.strided(), saved));
        CHECK_CLOSE(gdx.cpu(), dx_ref, 1e-5, 1e-6);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("every ReLU engine config gives the reference result") {
  Generator gen(83);
  const Shape s{8, 16, 4, 4};
  Tensor x = randn(s, {}, &gen), dy = randn(s, {}, &gen), y_ref = empty(s), dx_ref = empty(s);
  cpu::activation_forward(y_ref.strided(), x.strided(), kernel::ActivationKind::Relu, kernel::act::Relu::info.default_parameters);
  cpu::activation_backward(dx_ref.strided(), dy.strided(), y_ref.strided(), kernel::ActivationKind::Relu, kernel::act::Relu::info.default_parameters);
  Tensor gx = gpu(x), gy = gpu_nan(s), gdy = gpu(dy), gdx = gpu_nan(s);
  auto fwd = cudnn::all_working_plans(
      *cudnn::pointwise_forward_graph({CUDNN_POINTWISE_RELU_FWD}, gy.strided(), gx.strided()), cudnn::handle());
  CHECK(!fwd.empty());
  for (const auto& plan : fwd) {
    gy.fill_(NAN);
    run(*plan, cudnn::pointwise_forward_pointers(gy.strided(), gx.strided()));
    CHECK_CLOSE(gy.cpu(), y_ref, 0, 0);
  }
  auto bwd = cudnn::all_working_plans(
      *cudnn::pointwise_backward_graph({CUDNN_POINTWISE_RELU_BWD}, gdx.strided(), gdy.strided(), gy.strided()),
      cudnn::handle());
  CHECK(!bwd.empty());
  for (const auto& plan : bwd) {
    gdx.fill_(NAN);
    run(*plan, cudnn::pointwise_backward_pointers(gdx.strided(), gdy.strided(), gy.strided()));
    CHECK_CLOSE(gdx.cpu(), dx_ref, 0, 0);
  }
  // The backward with a second gradient added as it reads dy (autograd's sum, folded):
  // dx = relu'(dy + addend) at y.
  Tensor addend = randn(s, {}, &gen), sum_ref = empty(s), dx_sum_ref = empty(s);
  cpu::add_scaled(sum_ref.strided(), dy.strided(), addend.strided(), 1.0);
  cpu::activation_backward(dx_sum_ref.strided(), sum_ref.strided(), y_ref.strided(), kernel::ActivationKind::Relu,
                           kernel::act::Relu::info.default_parameters);
  Tensor gaddend = gpu(addend);
  const std::optional<Strided> av = gaddend.strided();
  auto summed = cudnn::all_working_plans(
      *cudnn::pointwise_backward_graph({CUDNN_POINTWISE_RELU_BWD}, gdx.strided(), gdy.strided(), gy.strided(), av),
      cudnn::handle());
  CHECK(!summed.empty());
  for (const auto& plan : summed) {
    CAPTURE(plan->notes().engine_id);
    gdx.fill_(NAN);
    run(*plan, cudnn::pointwise_backward_pointers(gdx.strided(), gdy.strided(), gy.strided(), av));
    CHECK_CLOSE(gdx.cpu(), dx_sum_ref, 1e-6, 1e-6);
  }
}
#endif  // LOOM_WITH_CUDA
