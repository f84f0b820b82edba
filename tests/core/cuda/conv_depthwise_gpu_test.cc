// File: tests/core/cuda/conv_depthwise_gpu_test.cc
// The depthwise convolution kernels (core/cuda/conv_depthwise.h) against the
// CPU reference in float64 on the same values (rounded to the dtype first):
// forward, data gradient and weight gradient on 300 random configurations
// (channels 1-70, a third of them multiples of 8 up to 320 so that channels-last
// operands move in 16-byte packs, in one or several channel tiles; filter side
// 1, 3, 5, 7, strides 1-3 and dilations 1-2 drawn apart for rows and columns,
// so that column strides 1 and 2 at dilation 1 take the packed kernels' column
// reuse and the rest their one-column form; padding 0 to the side, planes 1-20,
// odd and even, batch 1-3), NCHW and channels-last, float64, float32, bfloat16
// and float16, each pass run twice for the same bits; then 60 random 3 x 3
// layers at strides 1 and 2 (the 16-bit weight gradient's band kernel); then
// layers large enough for many weight-gradient chunks and 64-bit indices'
// neighbour (MobileNetV2's shapes); then
// conv2d with groups == channels on each path LOOM_CONV_DEPTHWISE names
// (loom, cudnn, auto) under strict fp32, TF32 and bf16 autocast against the CPU
// op, forward and every gradient.
//
// Tolerances, relative to the largest reference magnitude of each result:
// float64 1e-12; float32 1e-5 (at most 49-term sums in the forward and data
// gradient; the weight gradient sums N * P * Q <= 6272 terms in a fixed order);
// 16-bit outputs 8e-3 (one rounding, 2^-8 relative, on top of float32 sums).
// The op test: strict fp32 1e-5, TF32 2e-3 (cuDNN's TF32 rounds operands),
// bf16 autocast 1.6e-2 (bf16 operands and output).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <optional>
#include <random>
#include <vector>

#include "core/autocast.h"
#include "core/cpu/conv.h"
#include "core/cuda/conv_depthwise.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// stride and dilation are the rows'; stride_w and dilation_w the columns'.
struct Case {
  int64_t N, C, H, W, side, stride, pad, dilation, stride_w, dilation_w;
};

// A random configuration whose output has at least one pixel; with `packs`, the
// channels a multiple of 8 (up to 40 packs of 8, more than one tile of 32 packs),
// so that channels-last operands take the kernels' 16-byte channel packs in
// every dtype.
Case random_case(std::mt19937_64& rng, bool packs) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t sides[] = {1, 3, 5, 7};
  for (;;) {
    Case c{.N = pick(1, 3), .C = packs ? 8 * pick(1, 40) : pick(1, 70), .H = pick(1, 20), .W = pick(1, 20),
           .side = sides[pick(0, 3)], .stride = pick(1, 3), .pad = 0, .dilation = pick(1, 2),
           .stride_w = pick(1, 3), .dilation_w = pick(1, 2)};
    c.pad = pick(0, c.side);
    if (c.H + 2 * c.pad >= c.dilation * (c.side - 1) + 1 &&
        c.W + 2 * c.pad >= c.dilation_w * (c.side - 1) + 1) {
      return c;
    }
  }
}

// Normal CPU values, each exact in dtype (rounded on the GPU: the CPU holds no
// 16-bit tensors), as float64.
Tensor exact_randn(const Shape& sizes, DType dtype, Generator& gen) {
  return randn(sizes, {.dtype = DType::Float64}, &gen).to(testing::test_gpu()).to(dtype).to(DType::Float64).cpu();
}

double tolerance(DType dtype) {
  return dtype == DType::Float64 ? 1e-12 : dtype == DType::Float32 ? 1e-5 : 8e-3;
}

void check_case(const Case& c, DType dtype, MemoryFormat format, Generator& gen) {
  INFO("N ", c.N, " C ", c.C, " H ", c.H, " W ", c.W, " side ", c.side, " stride ", c.stride, "x",
       c.stride_w, " pad ", c.pad, " dilation ", c.dilation, "x", c.dilation_w, " ", dtype_name(dtype),
       " channels_last ", format == MemoryFormat::ChannelsLast);
  const kernel::ConvParams p{.stride_h = c.stride, .stride_w = c.stride_w, .pad_h = c.pad,
                          .pad_w = c.pad, .dilation_h = c.dilation, .dilation_w = c.dilation_w,
                          .groups = c.C};
  const int64_t P = cpu::conv_output_size(c.H, c.side, c.stride, c.pad, c.dilation);
  const int64_t Q = cpu::conv_output_size(c.W, c.side, c.stride_w, c.pad, c.dilation_w);
  const Tensor x = exact_randn({c.N, c.C, c.H, c.W}, dtype, gen);
  const Tensor w = exact_randn({c.C, 1, c.side, c.side}, dtype, gen);
  const Tensor dy = exact_randn({c.N, c.C, P, Q}, dtype, gen);
  Tensor y_ref = empty({c.N, c.C, P, Q}, {.dtype = DType::Float64});
  Tensor dx_ref = empty(x.sizes(), {.dtype = DType::Float64});
  Tensor dw_ref = empty(w.sizes(), {.dtype = DType::Float64});
  cpu::conv2d_forward(y_ref.strided(), x.strided(), w.strided(), nullptr, p);
  cpu::conv2d_dgrad(dx_ref.strided(), dy.strided(), w.strided(), p);
  cpu::conv2d_wgrad(dw_ref.strided(), dy.strided(), x.strided(), p);

  auto on_gpu = [&](const Tensor& t) { return t.to(testing::test_gpu()).to(dtype).contiguous(format); };
  auto poisoned = [&](const Shape& sizes) {
    return full(sizes, 1e30, {.dtype = dtype, .device = testing::test_gpu()}).contiguous(format);
  };
  const Tensor xg = on_gpu(x), wg = on_gpu(w), dyg = on_gpu(dy);
  REQUIRE(cuda::conv_depthwise_supported(xg.strided(), wg.strided(), p));
  const cuda::Scratch need = cuda::conv_depthwise_wgrad_scratch(dyg.strided(), wg.strided());
  struct Results {
    Tensor y, dx, dw;
  };
  auto run = [&] {
    const Results r{poisoned(y_ref.sizes()), poisoned(x.sizes()), poisoned(w.sizes())};
    const Tensor scratch = full({need.elements}, 1e30, {.dtype = need.dtype, .device = testing::test_gpu()});
    cuda::conv_depthwise_forward(r.y.strided(), xg.strided(), wg.strided(), p);
    cuda::conv_depthwise_dgrad(r.dx.strided(), dyg.strided(), wg.strided(), p);
    cuda::conv_depthwise_wgrad(r.dw.strided(), dyg.strided(), xg.strided(), p, scratch.strided());
    return r;
  };
  const Results first = run(), second = run();
  testing::check_scaled(first.y, y_ref, tolerance(dtype));
  testing::check_scaled(first.dx, dx_ref, tolerance(dtype));
  testing::check_scaled(first.dw, dw_ref, tolerance(dtype));
  // Fixed-order sums: a second run gives the same bits.
  CHECK(testing::values(second.y) == testing::values(first.y));
  CHECK(testing::values(second.dx) == testing::values(first.dx));
  CHECK(testing::values(second.dw) == testing::values(first.dw));
}

struct PathSetting {
  const char* name;
  NumericsPolicy policy;
  bool autocast;  // bfloat16 autocast
  double tol;
};
const PathSetting kSettings[] = {
    {"strict", {.precision = Precision::StrictFp32}, false, 1e-5},
    {"tf32", {.precision = Precision::Tf32}, false, 2e-3},
    {"bf16", {.precision = Precision::Bf16}, true, 1.6e-2},
};

Tensor leaf(const Tensor& t) {
  Tensor l = t.clone();
  l.requires_grad_();
  return l;
}

}  // namespace

LOOM_GPU_TEST_CASE("depthwise conv kernels match the CPU on random configurations") {
  Generator gen(3301);
  std::mt19937_64 rng(3301);
  const DType dtypes[] = {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16};
  for (int i = 0; i < 300; ++i) {
    const Case c = random_case(rng, i % 3 == 0);
    check_case(c, dtypes[i % 4], i % 8 < 4 ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast, gen);
  }
}

// The 16-bit 3 x 3 weight gradient at stride 1 or 2 (both directions, dilation
// 1) walks bands of eight output rows of two columns per thread in channel packs
// of 4 when channels-last; these shapes reach it from every side: channels
// multiples of 8 (the forward's packs too), of 4 only, and neither (no packs);
// heights up to 40 (up to five bands, the last one short), odd and even output
// widths (a last column pair of one column), padding 0-2
// (x rows and columns that no window reads); 16-bit dtypes and float32 (its
// own packed kernel), channels-last mostly and NCHW.
LOOM_GPU_TEST_CASE("depthwise 3x3 kernels at strides 1 and 2 match the CPU on random shapes") {
  Generator gen(3304);
  std::mt19937_64 rng(3304);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const DType dtypes[] = {DType::BFloat16, DType::Float16, DType::BFloat16, DType::Float32};
  for (int i = 0; i < 60; ++i) {
    const int64_t C = i % 3 == 0 ? 8 * pick(1, 40) : i % 3 == 1 ? 4 * pick(1, 40) : pick(1, 70);
    const int64_t stride = pick(1, 2), pad = pick(0, 2);
    const int64_t least = std::max<int64_t>(1, 3 - 2 * pad);  // the padded plane holds a window
    const Case c{.N = pick(1, 3), .C = C, .H = pick(least, 40), .W = pick(least, 20), .side = 3,
                 .stride = stride, .pad = pad, .dilation = 1, .stride_w = stride, .dilation_w = 1};
    check_case(c, dtypes[i % 4], i % 4 == 3 ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast, gen);
  }
}

// MobileNetV2's depthwise shapes at a small batch (many weight-gradient chunks,
// channels that are and are not multiples of 32, 960 channels in four tiles of
// packs), an odd width at stride 2, a plane of one row, and planes of seven and
// four bands of the 16-bit weight gradient (52 channels: 13 packs of 4).
LOOM_GPU_TEST_CASE("depthwise conv kernels match the CPU on MobileNet-sized layers") {
  Generator gen(3302);
  const Case large[] = {
      {.N = 4, .C = 144, .H = 32, .W = 32, .side = 3, .stride = 1, .pad = 1, .dilation = 1, .stride_w = 1,
       .dilation_w = 1},
      {.N = 4, .C = 96, .H = 32, .W = 32, .side = 3, .stride = 2, .pad = 1, .dilation = 1, .stride_w = 2,
       .dilation_w = 1},
      {.N = 8, .C = 960, .H = 4, .W = 4, .side = 3, .stride = 1, .pad = 1, .dilation = 1, .stride_w = 1,
       .dilation_w = 1},
      {.N = 3, .C = 200, .H = 17, .W = 33, .side = 3, .stride = 2, .pad = 1, .dilation = 1, .stride_w = 2,
       .dilation_w = 1},
      {.N = 2, .C = 40, .H = 1, .W = 300, .side = 5, .stride = 1, .pad = 2, .dilation = 1, .stride_w = 1,
       .dilation_w = 1},
      {.N = 2, .C = 64, .H = 56, .W = 56, .side = 3, .stride = 1, .pad = 1, .dilation = 1, .stride_w = 1,
       .dilation_w = 1},
      {.N = 2, .C = 52, .H = 57, .W = 55, .side = 3, .stride = 2, .pad = 1, .dilation = 1, .stride_w = 2,
       .dilation_w = 1}};
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (const Case& c : large) check_case(c, dtype, format, gen);
    }
  }
}

LOOM_GPU_TEST_CASE("the depthwise kernels decline what they were not built for") {
  auto supported = [](const Shape& x, const Shape& w, DType dtype, int64_t groups) {
    const Tensor xt = empty(x, {.dtype = dtype, .device = testing::test_gpu()});
    const Tensor wt = empty(w, {.dtype = dtype, .device = testing::test_gpu()});
    return cuda::conv_depthwise_supported(xt.strided(), wt.strided(), {.groups = groups});
  };
  CHECK(supported({2, 32, 8, 8}, {32, 1, 3, 3}, DType::Float32, 32));
  CHECK(supported({2, 32, 8, 8}, {32, 1, 7, 7}, DType::Float64, 32));
  CHECK_FALSE(supported({2, 32, 8, 8}, {64, 1, 3, 3}, DType::Float32, 32));  // channel multiplier 2
  CHECK_FALSE(supported({2, 32, 8, 8}, {16, 2, 3, 3}, DType::Float32, 16));  // 2 channels a group
  CHECK_FALSE(supported({2, 32, 8, 8}, {32, 1, 3, 5}, DType::Float32, 32));  // not square
  CHECK_FALSE(supported({2, 32, 8, 8}, {32, 1, 2, 2}, DType::Float32, 32));  // even side
  CHECK_FALSE(supported({2, 32, 8, 8}, {32, 1, 3, 3}, DType::Int32, 32));
  // A mismatched output is an error naming the op, not a launch.
  const Tensor x = empty({2, 4, 8, 8}, {.device = testing::test_gpu()});
  const Tensor w = empty({4, 1, 3, 3}, {.device = testing::test_gpu()});
  const Tensor y = empty({2, 4, 7, 8}, {.device = testing::test_gpu()});
  CHECK_THROWS_WITH_AS(cuda::conv_depthwise_forward(y.strided(), x.strided(), w.strided(), {.groups = 4}),
                       doctest::Contains("[conv_depthwise_forward]"), ValueError);
}

LOOM_GPU_TEST_CASE("conv2d with groups == channels matches the CPU on every path and numerics setting") {
  Generator gen(3303);
  const Tensor x0 = randn({3, 24, 13, 11}, {}, &gen), w0 = randn({24, 1, 3, 3}, {}, &gen);
  const Tensor b0 = randn({24}, {}, &gen);
  const Conv2dOptions o{.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}, .groups = 24};
  Tensor x_ref = leaf(x0), w_ref = leaf(w0), b_ref = leaf(b0);
  const Tensor y_ref = conv2d(x_ref, w_ref, b_ref, o);
  const Tensor dy = randn(y_ref.sizes(), {}, &gen);
  y_ref.backward(dy);
  for (const char* path : {"loom", "cudnn", "auto"}) {
    const testing::ScopedEnv env("LOOM_CONV_DEPTHWISE", path);
    for (const PathSetting& s : kSettings) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        INFO(path, " ", s.name, " channels_last ", format == MemoryFormat::ChannelsLast);
        const NumericsGuard policy(s.policy);
        const AutocastGuard autocast(s.autocast ? std::optional<DType>(DType::BFloat16) : std::nullopt);
        Tensor x = leaf(x0.to(testing::test_gpu()).contiguous(format));
        Tensor w = leaf(w0.to(testing::test_gpu()).contiguous(format));
        Tensor b = leaf(b0.to(testing::test_gpu()));
        const Tensor y = conv2d(x, w, b, o);
        y.backward(dy.to(testing::test_gpu()).to(y.dtype()).contiguous(format));
        testing::check_scaled(y, y_ref.detach(), s.tol);
        testing::check_scaled(x.grad(), x_ref.grad(), s.tol);
        testing::check_scaled(w.grad(), w_ref.grad(), s.tol);
        testing::check_scaled(b.grad(), b_ref.grad(), s.tol);
      }
    }
  }
}

#endif  // LOOM_WITH_CUDA
