// File: tests/core/cuda/conv_wgrad_mma_gpu_test.cc
// The tensor-core weight gradient (core/cuda/conv_wgrad_mma.h) against the CPU
// reference in float64 on the same values (rounded to the dtype first), on
// random configurations: batch 1-4, C and K multiples of 16 up to 128, square
// and oblong filters from 1x1 to 7x5, strides 1-3 per axis, any padding below
// the filter, planes from 1x1 to 40 wide (one tile or many; tiles cut short at
// the image's bottom), bfloat16, float16 and float32, dw NCHW or channels-last.
// Every result is computed twice: the same bits both times. Then what it
// declines, and conv2d's weight gradient under bf16 autocast and under TF32 on
// each path LOOM_CONV_WGRAD_MMA names (loom, cudnn, auto) against the CPU op,
// and under strict fp32, where the TF32 kernel must not run.
//
// Tolerance 8e-3 of the largest reference magnitude: one rounding to 16 bits
// (2^-8 relative for bfloat16) on top of float32 sums of exact products. Float32
// cases take values exact in bfloat16, so TF32 multiplies them exactly and the
// float32 sums alone err (1e-4); the ResNet layers also take full float32
// values, which TF32 rounds to 10 bits (4e-3).
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/autocast.h"
#include "core/cpu/conv.h"
#include "core/cuda/conv_wgrad_mma.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

struct Case {
  int64_t N, C, K, H, W, R, S;
  kernel::ConvParams p;
};

Case random_case(std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Case c{};
  c.N = pick(1, 4);
  c.C = 16 * pick(1, pick(0, 3) == 0 ? 8 : 4);
  c.K = 16 * pick(1, pick(0, 3) == 0 ? 8 : 4);
  c.R = pick(1, 7);
  c.S = pick(0, 1) == 0 ? c.R : pick(1, 5);
  c.p.stride_h = pick(1, 3);
  c.p.stride_w = pick(0, 1) == 0 ? c.p.stride_h : pick(1, 3);
  c.p.pad_h = pick(0, c.R - 1);
  c.p.pad_w = pick(0, c.S - 1);
  c.H = pick(std::max<int64_t>(1, c.R - 2 * c.p.pad_h), 40);
  c.W = pick(std::max<int64_t>(1, c.S - 2 * c.p.pad_w), 40);
  return c;
}

// Returns false, checking nothing, where the kernel declines the case (a tile
// of one output row and its window past a block's shared memory). full_fp32:
// float32 values that TF32 rounds, not bfloat16-exact ones.
bool check_case(const Case& c, DType dtype, MemoryFormat dw_format, Generator& gen, bool full_fp32 = false) {
  INFO("N ", c.N, " C ", c.C, " K ", c.K, " H ", c.H, " W ", c.W, " R ", c.R, " S ", c.S, " stride ",
       c.p.stride_h, "x", c.p.stride_w, " pad ", c.p.pad_h, "x", c.p.pad_w, " ", dtype_name(dtype),
       " dw channels_last ", dw_format == MemoryFormat::ChannelsLast, " full fp32 ", full_fp32);
  const int64_t P = cpu::conv_output_size(c.H, c.R, c.p.stride_h, c.p.pad_h, 1);
  const int64_t Q = cpu::conv_output_size(c.W, c.S, c.p.stride_w, c.p.pad_w, 1);
  const bool fp32 = dtype == DType::Float32;
  const DType exact_in = fp32 && !full_fp32 ? DType::BFloat16 : dtype;
  const Tensor x = testing::exact_randn({c.N, c.C, c.H, c.W}, exact_in, gen);
  const Tensor dy = testing::exact_randn({c.N, c.K, P, Q}, exact_in, gen);
  Tensor dw_ref = empty({c.K, c.C, c.R, c.S}, {.dtype = DType::Float64});
  cpu::conv2d_wgrad(dw_ref.strided(), dy.to(DType::Float64).strided(), x.to(DType::Float64).strided(), c.p);

  auto on_gpu = [&](const Tensor& t) {
    return t.to(testing::test_gpu()).to(dtype).contiguous(MemoryFormat::ChannelsLast);
  };
  const Tensor xg = on_gpu(x), dyg = on_gpu(dy);
  auto fresh_dw = [&] {
    return full(dw_ref.sizes(), 1e30, {.dtype = dtype, .device = testing::test_gpu()}).contiguous(dw_format);
  };
  const Tensor dw = fresh_dw(), again = fresh_dw();
  if (!cuda::conv_wgrad_mma_supported(dw.strided(), dyg.strided(), xg.strided(), c.p)) return false;
  const cuda::Scratch need = cuda::conv_wgrad_mma_scratch(dw.strided(), dyg.strided(), xg.strided(), c.p);
  const Tensor scratch = full({need.elements}, 1e30, {.dtype = need.dtype, .device = testing::test_gpu()});
  cuda::conv_wgrad_mma(dw.strided(), dyg.strided(), xg.strided(), c.p, scratch.strided());
  cuda::conv_wgrad_mma(again.strided(), dyg.strided(), xg.strided(), c.p, scratch.strided());
  testing::check_scaled(dw, dw_ref, fp32 ? (full_fp32 ? 4e-3 : 1e-4) : 8e-3);
  CHECK(testing::values(again.to(DType::Float32).cpu()) == testing::values(dw.to(DType::Float32).cpu()));
  return true;
}

}  // namespace

LOOM_GPU_TEST_CASE("the tensor-core weight gradient matches the CPU on random configurations") {
  std::mt19937 rng(2612);
  Generator gen(2613);
  int64_t checked = 0;
  const int64_t cases = 150;
  const DType dtypes[] = {DType::BFloat16, DType::Float16, DType::Float32};
  for (int64_t i = 0; i < cases; ++i) {
    const Case c = random_case(rng);
    const DType dtype = dtypes[i % 3];
    const MemoryFormat format = i % 4 == 0 ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast;
    checked += check_case(c, dtype, format, gen);
  }
  CHECK(checked >= cases * 3 / 4);
}

// The CIFAR ResNets' layers at a batch that spreads many tiles over each block.
LOOM_GPU_TEST_CASE("the tensor-core weight gradient matches the CPU on ResNet layers") {
  Generator gen(2614);
  const kernel::ConvParams pad1{.pad_h = 1, .pad_w = 1}, down{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  const Case layers[] = {{.N = 24, .C = 16, .K = 16, .H = 32, .W = 32, .R = 3, .S = 3, .p = pad1},
                         {.N = 24, .C = 16, .K = 32, .H = 32, .W = 32, .R = 3, .S = 3, .p = down},
                         {.N = 16, .C = 64, .K = 64, .H = 8, .W = 8, .R = 3, .S = 3, .p = pad1},
                         {.N = 4, .C = 128, .K = 128, .H = 16, .W = 16, .R = 3, .S = 3, .p = pad1},
                         {.N = 8, .C = 64, .K = 128, .H = 16, .W = 16, .R = 1, .S = 1,
                          .p = {.stride_h = 2, .stride_w = 2}}};
  for (const Case& c : layers) {
    for (DType dtype : {DType::BFloat16, DType::Float16, DType::Float32}) {
      CHECK(check_case(c, dtype, MemoryFormat::ChannelsLast, gen));
    }
    CHECK(check_case(c, DType::Float32, MemoryFormat::ChannelsLast, gen, /*full_fp32=*/true));
  }
}

LOOM_GPU_TEST_CASE("the tensor-core weight gradient declines what it was not built for") {
  auto supported = [](const Shape& x, const Shape& w, DType dtype, MemoryFormat format,
                      const kernel::ConvParams& p) {
    const Tensor xt = empty(x, {.dtype = dtype, .device = testing::test_gpu()}).contiguous(format);
    const Tensor dw = empty(w, {.dtype = dtype, .device = testing::test_gpu()});
    const int64_t P = cpu::conv_output_size(x[2], w[2], p.stride_h, p.pad_h, p.dilation_h);
    const int64_t Q = cpu::conv_output_size(x[3], w[3], p.stride_w, p.pad_w, p.dilation_w);
    const Tensor dy =
        empty({x[0], w[0], P, Q}, {.dtype = dtype, .device = testing::test_gpu()}).contiguous(format);
    return cuda::conv_wgrad_mma_supported(dw.strided(), dy.strided(), xt.strided(), p);
  };
  const MemoryFormat nhwc = MemoryFormat::ChannelsLast, nchw = MemoryFormat::Contiguous;
  const kernel::ConvParams pad1{.pad_h = 1, .pad_w = 1};
  CHECK(supported({2, 16, 8, 8}, {32, 16, 3, 3}, DType::BFloat16, nhwc, pad1));
  CHECK(supported({2, 16, 8, 8}, {32, 16, 3, 3}, DType::Float16, nhwc, pad1));
  CHECK(supported({2, 16, 8, 8}, {32, 16, 3, 3}, DType::Float32, nhwc, pad1));         // TF32 products
  CHECK_FALSE(supported({2, 16, 8, 8}, {32, 16, 3, 3}, DType::Float64, nhwc, pad1));   // 64-bit
  CHECK_FALSE(supported({2, 16, 8, 8}, {32, 16, 3, 3}, DType::BFloat16, nchw, pad1));  // NCHW
  CHECK_FALSE(supported({2, 8, 8, 8}, {32, 8, 3, 3}, DType::BFloat16, nhwc, pad1));    // C not 16k
  CHECK_FALSE(supported({2, 16, 8, 8}, {24, 16, 3, 3}, DType::BFloat16, nhwc, pad1));  // K not 16k
  CHECK_FALSE(supported({2, 256, 8, 8}, {32, 256, 3, 3}, DType::BFloat16, nhwc, pad1));  // C > 128
  CHECK_FALSE(supported({2, 16, 8, 8}, {32, 16, 3, 3}, DType::BFloat16, nhwc, {.dilation_h = 2}));
  // One output row of a 128-channel 7x7 filter over a plane 400 wide: its window is past the 96 KiB a
  // block may take.
  CHECK_FALSE(supported({1, 128, 9, 400}, {16, 128, 7, 7}, DType::BFloat16, nhwc, {}));

  // A scratch short of what conv_wgrad_mma_scratch asks, or of another dtype, is refused, not overrun.
  const TensorOptions bf16{.dtype = DType::BFloat16, .device = testing::test_gpu()};
  const Tensor x = zeros({2, 16, 8, 8}, bf16).contiguous(nhwc), dy = zeros({2, 32, 8, 8}, bf16).contiguous(nhwc);
  const Tensor dw = empty({32, 16, 3, 3}, bf16);
  const cuda::Scratch need = cuda::conv_wgrad_mma_scratch(dw.strided(), dy.strided(), x.strided(), pad1);
  REQUIRE(need.elements > 1);
  const Tensor short_scratch = empty({need.elements - 1}, {.dtype = need.dtype, .device = testing::test_gpu()});
  const Tensor float16_scratch = empty({need.elements}, {.dtype = DType::Float16, .device = testing::test_gpu()});
  for (const Tensor& scratch : {short_scratch, float16_scratch}) {
    CHECK_THROWS_AS(cuda::conv_wgrad_mma(dw.strided(), dy.strided(), x.strided(), pad1, scratch.strided()),
                    ValueError);
  }
}

namespace {

// A 3x3 layer, its operands and its weight gradient on the CPU in float32.
struct WgradLayer {
  Tensor x, w, dy, dw;
};

WgradLayer cpu_wgrad_layer(uint64_t seed) {
  Generator gen(seed);
  WgradLayer layer{.x = randn({6, 32, 12, 10}, {}, &gen), .w = randn({48, 32, 3, 3}, {}, &gen)};
  Tensor w = layer.w.clone();
  w.requires_grad_();
  const Tensor y = conv2d(layer.x, w, Tensor(), {.padding = 1});
  layer.dy = randn(y.sizes(), {}, &gen);
  y.backward(layer.dy);
  layer.dw = w.grad();
  return layer;
}

// conv2d's weight gradient of the layer on the GPU, channels-last, under the current policy and autocast.
Tensor gpu_wgrad(const WgradLayer& layer) {
  Tensor w = layer.w.to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
  w.requires_grad_();
  const Tensor x = layer.x.to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = conv2d(x, w, Tensor(), {.padding = 1});
  y.backward(layer.dy.to(testing::test_gpu()).to(y.dtype()).contiguous(MemoryFormat::ChannelsLast));
  return w.grad();
}

}  // namespace

LOOM_GPU_TEST_CASE("conv2d's bf16 weight gradient matches the CPU on every LOOM_CONV_WGRAD_MMA path") {
  const WgradLayer layer = cpu_wgrad_layer(2615);
  for (const char* path : {"loom", "cudnn", "auto"}) {
    INFO("LOOM_CONV_WGRAD_MMA=", path);
    const testing::ScopedEnv env("LOOM_CONV_WGRAD_MMA", path);
    const NumericsGuard policy({.precision = Precision::Bf16});
    const AutocastGuard autocast(DType::BFloat16);
    testing::check_scaled(gpu_wgrad(layer), layer.dw, 1.6e-2);
  }
}

// Float32 operands: under TF32 the kernel may take them (forced on the "loom" path); under strict fp32 it
// must not, whatever the path says, and cuDNN's IEEE wgrad gives the CPU's values to 1e-4 (TF32 products
// would not).
LOOM_GPU_TEST_CASE("conv2d's float32 weight gradient matches the CPU under TF32 and strict fp32 on every path") {
  const WgradLayer layer = cpu_wgrad_layer(2616);
  for (Precision precision : {Precision::Tf32, Precision::StrictFp32}) {
    for (const char* path : {"loom", "cudnn", "auto"}) {
      INFO(precision_name(precision), " LOOM_CONV_WGRAD_MMA=", path);
      const testing::ScopedEnv env("LOOM_CONV_WGRAD_MMA", path);
      const NumericsGuard policy({.precision = precision});
      testing::check_scaled(gpu_wgrad(layer), layer.dw, precision == Precision::Tf32 ? 1e-2 : 1e-4);
    }
  }
}

#endif  // LOOM_WITH_CUDA
