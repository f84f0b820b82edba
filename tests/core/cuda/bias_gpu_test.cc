// File: tests/core/cuda/bias_gpu_test.cc
// cuda::add_channel_bias, cuda::channel_sum and cuda::relu_grad_sum against
// plain loops (and cpu::conv2d_bgrad) on the same inputs: NCHW, channels-last and (N, C)
// operands, float32 / float64 / bfloat16, C = 1, 3, 33, 64 and N*H*W = 1, 7,
// 100003, 16-byte aligned and unaligned starts. y is a slice of a bigger buffer
// whose guard images must come back untouched; db starts as NaN.
//
// Tolerances. The bias add is one addition: exact for float64, one float32
// rounding for float32 (rtol 1e-6), one bf16 rounding for bfloat16 (rtol 8e-3,
// atol 1e-5). Sums are checked on small integers, whose float32 sums are exact
// below 2^24, so every dtype must match exactly; a float32 sum of normals,
// summed in a different order from the CPU's double, gets rtol 1e-5 and
// atol 1e-7 * R for R summed elements.
//
// N batch, C channels, H, W spatial; R = N * H * W.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/cpu/conv.h"
#include "core/cuda/bias.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kChannels[] = {1, 3, 33, 64};
constexpr DType kDtypes[] = {DType::Float32, DType::Float64, DType::BFloat16};

// (N, H, W) with N * H * W in {1, 7, 100003}, spread over batch and plane.
const std::vector<Shape>& batch_planes() {
  static const std::vector<Shape> all = {{1, 1, 1}, {7, 1, 1}, {1, 7, 1}, {1, 1, 100003}};
  return all;
}

struct Case {
  Shape sizes;  // (N, C, H, W) or (N, C)
  MemoryFormat format;
};

std::vector<Case> cases_for(int64_t c) {
  std::vector<Case> all;
  for (const Shape& p : batch_planes()) {
    for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      all.push_back({{p[0], c, p[1], p[2]}, f});
    }
    all.push_back({{p[0] * p[1] * p[2], c}, MemoryFormat::Contiguous});
  }
  return all;
}

std::string name_of(const Case& k, DType dtype) {
  return shape_str(k.sizes) + (k.format == MemoryFormat::ChannelsLast ? " nhwc " : " nchw ") +
         std::string(dtype_name(dtype));
}

// Values exactly representable in `dtype`, as float64 on the CPU.
Tensor representable(const Tensor& t, DType dtype) {
  return t.to(dtype).to(DType::Float64);
}

// A GPU buffer of N + 2 images in `format`; y is images 1 .. N, so its start is
// unaligned whenever one image is not a multiple of 16 bytes.
struct Guarded {
  Tensor base, y;
};

Guarded guarded(const Tensor& values, DType dtype, MemoryFormat format, Generator& gen) {
  Shape base_sizes = values.sizes();
  base_sizes[0] += 2;
  Tensor base = randn(base_sizes, {.dtype = DType::Float64}, &gen)
                    .to(testing::test_gpu())
                    .to(dtype)
                    .contiguous(format);
  Tensor y = base.slice(0, 1, values.size(0) + 1);
  y.copy_(values.to(testing::test_gpu()));
  return {base, y};
}

void check_guards(const Guarded& g, const Tensor& base_before) {
  const int64_t last = g.base.size(0) - 1;
  CHECK_CLOSE(g.base.slice(0, 0, 1).to(DType::Float64).cpu(),
              base_before.slice(0, 0, 1), 0, 0);
  CHECK_CLOSE(g.base.slice(0, last, last + 1).to(DType::Float64).cpu(),
              base_before.slice(0, last, last + 1), 0, 0);
}

// y (N, C, ...) + b[c] in float64, row-major.
std::vector<double> biased(const Tensor& y, const Tensor& b) {
  std::vector<double> values = y.to_vector<double>(), bias = b.to_vector<double>();
  const int64_t c = y.size(1), inner = y.numel() / std::max<int64_t>(y.size(0) * c, 1);
  for (size_t i = 0; i < values.size(); ++i) values[i] += bias[(i / inner) % c];
  return values;
}

// The sum over every dim but 1, in float64.
std::vector<double> channel_sums(const Tensor& dy) {
  const int64_t c = dy.size(1), inner = dy.numel() / std::max<int64_t>(dy.size(0) * c, 1);
  std::vector<double> values = dy.to_vector<double>(), sums(c, 0.0);
  for (size_t i = 0; i < values.size(); ++i) sums[(i / inner) % c] += values[i];
  return sums;
}

Tensor as_tensor(const std::vector<double>& values, const Shape& sizes) {
  return tensor(values, sizes, {.dtype = DType::Float64});
}

void check_bias_add(const Case& k, DType dtype, DType bias_dtype, Generator& gen) {
  INFO(name_of(k, dtype) << " bias " << dtype_name(bias_dtype));
  Tensor values = representable(randn(k.sizes, {.dtype = DType::Float64}, &gen), dtype);
  Tensor bias = representable(randn({k.sizes[1]}, {.dtype = DType::Float64}, &gen), bias_dtype);
  Guarded g = guarded(values, dtype, k.format, gen);
  Tensor base_before = g.base.to(DType::Float64).cpu();
  cuda::add_channel_bias(g.y.strided(), bias.to(testing::test_gpu()).to(bias_dtype).strided());
  Tensor expected = as_tensor(biased(values, bias), k.sizes);
  Tensor actual = g.y.to(DType::Float64).cpu();
  if (dtype == DType::Float64) {
    CHECK_CLOSE(actual, expected, 0, 0);
  } else if (dtype == DType::Float32) {
    CHECK_CLOSE(actual, expected, 1e-6, 1e-7);
  } else {
    CHECK_CLOSE(actual, expected, 8e-3, 1e-5);
  }
  check_guards(g, base_before);
}

// db in db_dtype after channel_sum of dy, db poisoned first.
Tensor gpu_channel_sum(const Tensor& dy_gpu, DType db_dtype) {
  Tensor db = empty({dy_gpu.size(1)}, {.dtype = db_dtype, .device = testing::test_gpu()}).fill_(kNaN);
  cuda::channel_sum(db.strided(), dy_gpu.strided());
  return db;
}

void check_integer_sum(const Case& k, DType dtype, DType db_dtype, Generator& gen) {
  INFO(name_of(k, dtype) << " db " << dtype_name(db_dtype));
  Tensor values = randint(-8, 9, k.sizes, {.dtype = DType::Int64}, &gen).to(DType::Float64);
  Tensor dy = values.to(testing::test_gpu()).to(dtype).contiguous(k.format);
  Tensor db = gpu_channel_sum(dy, db_dtype).to(DType::Float64).cpu();
  Tensor expected = representable(as_tensor(channel_sums(values), {k.sizes[1]}), db_dtype);
  CHECK_CLOSE(db, expected, 0, 0);
}

// relu_grad_sum on small integers (y with zeros, negatives and a NaN, none of
// which passes the gradient): g exactly dy where y > 0, db exactly its sums.
void check_relu_grad_sum(const Case& k, DType dtype, DType db_dtype, Generator& gen) {
  INFO(name_of(k, dtype) << " db " << dtype_name(db_dtype));
  Tensor dy_values = randint(-8, 9, k.sizes, {.dtype = DType::Int64}, &gen).to(DType::Float64);
  Tensor y_values = randint(-2, 3, k.sizes, {.dtype = DType::Int64}, &gen).to(DType::Float64);
  std::vector<double> y_list = y_values.to_vector<double>(), dy_list = dy_values.to_vector<double>();
  y_list[y_list.size() / 2] = kNaN;
  std::vector<double> g_list(dy_list.size());
  for (size_t i = 0; i < g_list.size(); ++i) g_list[i] = y_list[i] > 0 ? dy_list[i] : 0.0;
  const Tensor g_expected = as_tensor(g_list, k.sizes);
  Tensor dy = dy_values.to(testing::test_gpu()).to(dtype).contiguous(k.format);
  Tensor y = as_tensor(y_list, k.sizes).to(testing::test_gpu()).to(dtype).contiguous(k.format);
  Tensor g = empty_like(dy).fill_(kNaN);
  Tensor db = empty({k.sizes[1]}, {.dtype = db_dtype, .device = testing::test_gpu()}).fill_(kNaN);
  cuda::relu_grad_sum(g.strided(), db.strided(), dy.strided(), y.strided());
  CHECK(g.strides() == dy.strides());
  CHECK_CLOSE(g.to(DType::Float64).cpu(), g_expected, 0, 0);
  CHECK_CLOSE(db.to(DType::Float64).cpu(),
              representable(as_tensor(channel_sums(g_expected), {k.sizes[1]}), db_dtype), 0, 0);
}

// check(case, dtype, result dtype, gen) for every channel count, case and
// dtype, result in the operand's dtype, and for bfloat16 with a float32 result.
template <class Check>
void for_every_case(Generator& gen, Check check) {
  for (int64_t c : kChannels) {
    for (const Case& k : cases_for(c)) {
      for (DType dtype : kDtypes) check(k, dtype, dtype, gen);
      check(k, DType::BFloat16, DType::Float32, gen);
    }
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("relu_grad_sum masks dy by y > 0 and sums it per channel, exactly") {
  Generator gen(16);
  for_every_case(gen, check_relu_grad_sum);
  const Tensor dy = zeros({4, 3}, {.device = testing::test_gpu()});
  const Tensor db = zeros({3}, {.device = testing::test_gpu()});
  CHECK_THROWS_WITH_FRAGMENT(cuda::relu_grad_sum(dy.strided(), db.strided(), dy.strided(),
                                                 zeros({4, 3}, {.dtype = DType::Float64, .device = testing::test_gpu()}).strided()),
                             ValueError, "g and y must have dy's dtype, sizes and strides");
}

LOOM_GPU_TEST_CASE("add_channel_bias matches y + b[c] in every layout, size and dtype") {
  Generator gen(11);
  for_every_case(gen, check_bias_add);
}

LOOM_GPU_TEST_CASE("channel_sum adds every element of each channel exactly") {
  Generator gen(12);
  for_every_case(gen, check_integer_sum);
}

LOOM_GPU_TEST_CASE("channel_sum matches cpu::conv2d_bgrad on normal values") {
  Generator gen(13);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (const Shape& sizes : {Shape{128, 32, 28, 28}, Shape{5, 33, 101, 3}, Shape{3, 64, 1, 1}}) {
        INFO(shape_str(sizes) << " " << dtype_name(dtype)
                              << (format == MemoryFormat::ChannelsLast ? " nhwc" : " nchw"));
        Tensor dy = randn(sizes, {.dtype = dtype}, &gen);
        Tensor expected = empty({sizes[1]}, {.dtype = dtype});
        cpu::conv2d_bgrad(expected.strided(), dy.strided());
        Tensor db = gpu_channel_sum(dy.to(testing::test_gpu()).contiguous(format), dtype).cpu();
        const double r = static_cast<double>(dy.numel() / sizes[1]);
        if (dtype == DType::Float64) {
          CHECK_CLOSE(db, expected, 1e-12, 1e-15 * r);
        } else {
          CHECK_CLOSE(db, expected, 1e-5, 1e-7 * r);
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("channel_sum gives the same bits on every run") {
  Generator gen(14);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    Tensor dy = randn({3, 33, 100003, 1}, {}, &gen).to(testing::test_gpu()).contiguous(format);
    std::vector<float> first = gpu_channel_sum(dy, DType::Float32).to_vector<float>();
    std::vector<float> second = gpu_channel_sum(dy, DType::Float32).to_vector<float>();
    CHECK(first == second);
  }
}

LOOM_GPU_TEST_CASE("channel_sum of an empty batch is zero; empty y is left alone") {
  Tensor dy = empty({0, 5, 3, 3}, {.device = testing::test_gpu()});
  CHECK_CLOSE(gpu_channel_sum(dy, DType::Float32).cpu(), zeros({5}), 0, 0);
  Tensor y = empty({0, 5}, {.device = testing::test_gpu()});
  Tensor b = ones({5}, {.device = testing::test_gpu()});
  CHECK_NOTHROW(cuda::add_channel_bias(y.strided(), b.strided()));
}

LOOM_GPU_TEST_CASE("the bias kernels refuse operands that are not dense") {
  Tensor y = zeros({4, 3, 6, 5}, {.device = testing::test_gpu()}).slice(3, 0, 5, 2);
  Tensor b = zeros({3}, {.device = testing::test_gpu()});
  CHECK_THROWS_WITH_FRAGMENT(cuda::add_channel_bias(y.strided(), b.strided()), ValueError,
                             "[add_channel_bias] expects");
  CHECK_THROWS_WITH_FRAGMENT(cuda::channel_sum(b.strided(), y.strided()), ValueError,
                             "(4, 3, 6, 3)");
}

#endif  // LOOM_WITH_CUDA
