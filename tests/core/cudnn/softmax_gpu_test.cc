// File: tests/core/cudnn/softmax_gpu_test.cc
// cuDNN softmax and log-softmax, forward and backward, against the CPU
// reference kernels over every dim of 2-D, 3-D and 4-D inputs in both float
// dtypes; then 0-D, size-1 and empty operands, a row of 1000003 classes, and
// the error for a non-contiguous operand.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cmath>
#include <vector>

#include "core/cpu/softmax.h"
#include "core/cudnn/softmax.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

using Forward = void (*)(const Strided& y, const Strided& x, int64_t dim);
using Backward = void (*)(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim);

// The CPU reference and the cuDNN version of one function pair.
struct Kernels {
  const char* name;
  Forward cpu_forward, gpu_forward;
  Backward cpu_backward, gpu_backward;
};

const Kernels kKernels[] = {
    {"softmax", cpu::softmax_forward, cudnn::softmax_forward, cpu::softmax_backward,
     cudnn::softmax_backward},
    {"log_softmax", cpu::log_softmax_forward, cudnn::log_softmax_forward, cpu::log_softmax_backward,
     cudnn::log_softmax_backward},
};

struct Tolerance {
  double rtol, atol;
};

Tolerance tolerance_for(DType dtype) {
  return dtype == DType::Float32 ? Tolerance{1e-5, 1e-6} : Tolerance{1e-11, 1e-12};
}

Tensor poisoned(const Shape& sizes, DType dtype) {
  return full(sizes, NAN, {.dtype = dtype, .device = testing::test_gpu()});
}

// Forward on x and backward on a random dy, each against the CPU kernels fed
// the same values (the backward from the CPU's y, so the errors do not stack).
void check_pair(const Kernels& k, const Shape& sizes, int64_t dim, DType dtype, Tolerance tol,
                Generator& gen) {
  CAPTURE(k.name);
  CAPTURE(shape_str(sizes));
  CAPTURE(dim);
  CAPTURE(dtype_name(dtype));
  Tensor x = randn(sizes, {.dtype = dtype}, &gen), dy = randn(sizes, {.dtype = dtype}, &gen);
  Tensor y_ref = empty(sizes, {.dtype = dtype}), dx_ref = empty(sizes, {.dtype = dtype});
  k.cpu_forward(y_ref.strided(), x.strided(), dim);
  k.cpu_backward(dx_ref.strided(), dy.strided(), y_ref.strided(), dim);

  Tensor y = poisoned(sizes, dtype), dx = poisoned(sizes, dtype);
  k.gpu_forward(y.strided(), x.to(testing::test_gpu()).strided(), dim);
  CHECK_CLOSE(y.cpu(), y_ref, tol.rtol, tol.atol);
  k.gpu_backward(dx.strided(), dy.to(testing::test_gpu()).strided(), y_ref.to(testing::test_gpu()).strided(),
                 dim);
  CHECK_CLOSE(dx.cpu(), dx_ref, tol.rtol, tol.atol);
}

}  // namespace

LOOM_GPU_TEST_CASE("cuDNN softmax and log_softmax match the CPU over every dim of 2-D to 4-D") {
  Generator gen(51);
  const std::vector<Shape> shapes = {{7, 13}, {3, 5, 7}, {2, 3, 4, 5}, {4, 1, 6}};
  for (const Kernels& k : kKernels) {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      for (const Shape& sizes : shapes) {
        for (int64_t dim = 0; dim < static_cast<int64_t>(sizes.size()); ++dim) {
          check_pair(k, sizes, dim, dtype, tolerance_for(dtype), gen);
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("cuDNN softmax on 0-D, 1-D and long rows") {
  Generator gen(52);
  for (const Kernels& k : kKernels) {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      check_pair(k, {}, 0, dtype, tolerance_for(dtype), gen);
      check_pair(k, {1}, 0, dtype, tolerance_for(dtype), gen);
      check_pair(k, {7}, 0, dtype, tolerance_for(dtype), gen);
    }
    // 1000003 classes in one row: cuDNN's float32 sum of a million terms may
    // run in any order (even one thread's sequence), the CPU's in double, so
    // the sum may differ by ~1e-4 relative. Softmax values are ~1e-6 each,
    // hence its tiny atol; log-softmax values are ~-14.
    const bool log = k.cpu_forward == cpu::log_softmax_forward;
    check_pair(k, {1000003}, 0, DType::Float32,
               log ? Tolerance{1e-5, 1e-4} : Tolerance{1e-3, 1e-10}, gen);
    check_pair(k, {1000003}, 0, DType::Float64, {1e-9, 1e-14}, gen);
  }
}

LOOM_GPU_TEST_CASE("cuDNN softmax of an empty tensor writes nothing and does not fail") {
  Tensor x = empty({0, 5}, {.device = testing::test_gpu()}),
         y = empty({0, 5}, {.device = testing::test_gpu()});
  CHECK_NOTHROW(cudnn::softmax_forward(y.strided(), x.strided(), 1));
  CHECK_NOTHROW(cudnn::log_softmax_backward(y.strided(), x.strided(), x.strided(), 0));
}

LOOM_GPU_TEST_CASE("cuDNN softmax refuses non-contiguous operands, naming the fix") {
  Tensor x = zeros({4, 6}, {.device = testing::test_gpu()}).t();
  Tensor y = empty({6, 4}, {.device = testing::test_gpu()});
  CHECK_THROWS_WITH_FRAGMENT(cudnn::softmax_forward(y.strided(), x.strided(), 1), ValueError,
                             "[softmax] cuDNN softmax needs a contiguous (row-major) input, got "
                             "shape (6, 4) with strides (1, 6); call .contiguous()");
  Tensor nhwc =
      zeros({2, 3, 4, 5}, {.device = testing::test_gpu()}).contiguous(MemoryFormat::ChannelsLast);
  CHECK_THROWS_WITH_FRAGMENT(
      cudnn::log_softmax_backward(nhwc.strided(), nhwc.strided(), nhwc.strided(), 1), ValueError,
      "[log_softmax] cuDNN softmax needs a contiguous (row-major) forward output");
}
#endif  // LOOM_WITH_CUDA
