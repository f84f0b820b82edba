// File: tests/core/cudnn/pool_gpu_test.cc
// cuDNN resample graphs (max and average pooling, forward and backward) against
// the CPU reference, in NCHW (X/Y contract) and NHWC (index contract).
//
// N batch, C channels, H, W input, P, Q output.
#include <doctest/doctest.h>

#include <cmath>

#ifdef LOOM_WITH_CUDA
#include "core/cpu/pool.h"
#include "core/cudnn/pool.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

struct Case {
  Shape x;
  kernel::Pool2dParams p;
};

const Case kCases[] = {
    {{2, 8, 8, 8}, {2, 2, 2, 2, 0, 0}},
    {{2, 4, 9, 7}, {3, 3, 2, 2, 1, 1}},
    {{1, 16, 6, 6}, {3, 3, 1, 1, 1, 1}},
    {{3, 3, 10, 10}, {2, 2, 2, 2, 1, 1}},
};

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t pad) { return (in + 2 * pad - k) / s + 1; }

Shape out_shape(const Case& c) {
  return {c.x[0], c.x[1], out_size(c.x[2], c.p.kernel_h, c.p.stride_h, c.p.pad_h),
          out_size(c.x[3], c.p.kernel_w, c.p.stride_w, c.p.pad_w)};
}

Tensor gpu_nan(const Shape& sizes, MemoryFormat format, DType dtype = DType::Float32) {
  Tensor t = empty(sizes, {.dtype = dtype, .device = testing::test_gpu(), .memory_format = format});
  if (dtype == DType::Float32) t.fill_(NAN);
  return t;
}

void check_pool(const Case& c, bool max, bool include_pad, MemoryFormat format, Generator& gen) {
  CAPTURE(shape_str(c.x));
  CAPTURE(max);
  CAPTURE(include_pad);
  CAPTURE(memory_format_name(format));
  kernel::Pool2dParams params = c.p;
  params.max = max;
  params.count_include_pad = include_pad;
  Tensor x = randn(c.x, {}, &gen), dy = randn(out_shape(c), {}, &gen);
  Tensor y_ref = empty(out_shape(c)), dx_ref = empty(c.x), idx = empty(out_shape(c), {.dtype = DType::Int64});
  if (max) {
    cpu::max_pool2d_forward(y_ref.strided(), idx.strided(), x.strided(), c.p);
    cpu::max_pool2d_backward(dx_ref.strided(), dy.strided(), idx.strided());
  } else {
    cpu::avg_pool2d_forward(y_ref.strided(), x.strided(), params);
    cpu::avg_pool2d_backward(dx_ref.strided(), dy.strided(), params);
  }
  Tensor gx = x.to(testing::test_gpu()).contiguous(format), gdy = dy.to(testing::test_gpu()).contiguous(format);
  Tensor gy = gpu_nan(out_shape(c), format), gdx = gpu_nan(c.x, format);
  bool indexed = max && cudnn::pool_uses_index(gx.strided());
  Tensor index = indexed ? gpu_nan(out_shape(c), format, DType::UInt8) : Tensor();
  Strided index_view = indexed ? index.strided() : Strided{};
  REQUIRE(cudnn::pool2d_forward(gy.strided(), indexed ? &index_view : nullptr, gx.strided(), params));
  CHECK_CLOSE(gy.cpu(), y_ref, 1e-5, 1e-6);
  Strided xs = gx.strided(), ys = gy.strided();
  cudnn::PoolBackwardInputs saved;
  if (indexed) {
    saved.index = &index_view;
  } else if (format == MemoryFormat::Contiguous) {
    saved.x = &xs;
    saved.y = &ys;
  }
  REQUIRE(cudnn::pool2d_backward(gdx.strided(), gdy.strided(), saved, params));
  CHECK_CLOSE(gdx.cpu(), dx_ref, 1e-5, 1e-6);
}

}  // namespace

LOOM_GPU_TEST_CASE("cuDNN max and average pooling match the CPU reference in both layouts") {
  Generator gen(31);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (const Case& c : kCases) {
      check_pool(c, /*max=*/true, true, format, gen);
      check_pool(c, /*max=*/false, /*include_pad=*/true, format, gen);
      check_pool(c, /*max=*/false, /*include_pad=*/false, format, gen);
    }
  }
}

LOOM_GPU_TEST_CASE("an average-pool divisor cuDNN counts differently is declined") {
  // ceil mode adds a window past the padded input; PyTorch's include-pad divisor clips it.
  Case c{{1, 2, 5, 5}, {2, 2, 2, 2, 0, 0}};
  Tensor x = ones(c.x, {.device = testing::test_gpu()});
  Tensor y = empty({1, 2, 3, 3}, {.device = testing::test_gpu()});
  kernel::Pool2dParams params = c.p;
  params.max = false;
  CHECK_FALSE(cudnn::pool2d_forward(y.strided(), nullptr, x.strided(), params));
}
#endif  // LOOM_WITH_CUDA
