// File: tests/core/cudnn/norm_gpu_test.cc
// cuDNN batch-norm training forward (with running statistics) and backward
// against the CPU reference, in NCHW and NHWC.
//
// N batch, C channels, H, W.
#include <doctest/doctest.h>

#include <cmath>

#ifdef LOOM_WITH_CUDA
#include "core/cpu/norm.h"
#include "core/cudnn/norm.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

Tensor on_gpu(const Tensor& t, MemoryFormat format = MemoryFormat::Contiguous) {
  return t.to(testing::test_gpu()).contiguous(format);
}

Tensor gpu_empty(const Shape& sizes, MemoryFormat format = MemoryFormat::Contiguous) {
  return full(sizes, NAN, {.device = testing::test_gpu(), .memory_format = format});
}

}  // namespace

LOOM_GPU_TEST_CASE("cuDNN batch-norm training forward and backward match the CPU reference") {
  Generator gen(21);
  const Shape shapes[] = {{4, 8, 5, 5}, {2, 16, 7, 3}, {8, 4, 1, 1}, {3, 32, 8, 8}};
  const double eps = 1e-5, momentum = 0.1;
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (const Shape& s : shapes) {
      CAPTURE(shape_str(s));
      CAPTURE(memory_format_name(format));
      const int64_t c = s[1];
      Tensor x = add(mul(randn(s, {}, &gen), 2.0), 0.5);
      Tensor w = add(rand({c}, {}, &gen), 0.5), b = randn({c}, {}, &gen);
      Tensor rm = randn({c}, {}, &gen), rv = add(rand({c}, {}, &gen), 0.5);
      Tensor dy = randn(s, {}, &gen);

      // CPU reference.
      Tensor mean_ref = empty({c}), invstd_ref = empty({c}), y_ref = empty(s);
      Tensor rm_ref = rm.clone(), rv_ref = rv.clone();
      cpu::batch_norm_batch_stats(mean_ref.strided(), invstd_ref.strided(), x.strided(), eps,
                                  kernel::RunningStats{rm_ref.strided(), rv_ref.strided(), momentum});
      cpu::batch_norm_forward(y_ref.strided(), x.strided(), mean_ref.strided(), invstd_ref.strided(),
                              w.strided(), b.strided());
      Tensor dx_ref = empty(s), dw_ref = empty({c}), db_ref = empty({c});
      cpu::batch_norm_backward(dx_ref.strided(), dw_ref.strided(), db_ref.strided(), dy.strided(),
                               x.strided(), mean_ref.strided(), invstd_ref.strided(), w.strided(),
                               /*training=*/true);

      // GPU.
      Tensor gx = on_gpu(x, format), gw = on_gpu(w), gb = on_gpu(b), grm = on_gpu(rm), grv = on_gpu(rv);
      Tensor gy = gpu_empty(s, format), gmean = gpu_empty({c}), ginvstd = gpu_empty({c});
      cudnn::batch_norm_forward_training({.y = gy.strided(), .save_mean = gmean.strided(),
                                          .save_invstd = ginvstd.strided(), .x = gx.strided(),
                                          .weight = gw.strided(), .bias = gb.strided(),
                                          .running_mean = grm.strided(), .running_var = grv.strided(),
                                          .eps = eps, .momentum = momentum});
      CHECK_CLOSE(gy.cpu(), y_ref, 1e-4, 1e-5);
      CHECK_CLOSE(gmean.cpu(), mean_ref, 1e-4, 1e-5);
      CHECK_CLOSE(ginvstd.cpu(), invstd_ref, 1e-4, 1e-5);
      CHECK_CLOSE(grm.cpu(), rm_ref, 1e-4, 1e-5);
      CHECK_CLOSE(grv.cpu(), rv_ref, 1e-4, 1e-5);

      Tensor gdy = on_gpu(dy, format), gdx = gpu_empty(s, format), gdw = gpu_empty({c}), gdb = gpu_empty({c});
      cudnn::batch_norm_backward({.dx = gdx.strided(), .dweight = gdw.strided(), .dbias = gdb.strided(),
                                  .dy = gdy.strided(), .x = gx.strided(), .weight = gw.strided(),
                                  .save_mean = gmean.strided(), .save_invstd = ginvstd.strided()});
      CHECK_CLOSE(gdx.cpu(), dx_ref, 1e-3, 1e-4);
      CHECK_CLOSE(gdw.cpu(), dw_ref, 1e-3, 1e-4);
      CHECK_CLOSE(gdb.cpu(), db_ref, 1e-3, 1e-4);
    }
  }
}
#endif  // LOOM_WITH_CUDA
