// File: tests/core/cuda/conv_small_gpu_test.cc
// The small-channel convolution kernels (core/cuda/conv_small.h) against the
// CPU reference in float64 on the same values (rounded to the dtype first):
// forward, data gradient (stride 1), weight gradient and the bias gradient
// summed alongside it (same dw bits with and without), C = 1, 3, 4, 6, 8, K
// that 8, 4, 2 or nothing divides, 3x3 and 5x5 filters, stride 1 and 2,
// padding 0 to 2, and few output channels (K = 1, 2, 5, 8) from C = 12, 16, 40,
// 64 through 1x1 and 3x3 filters; odd planes, NCHW and channels-last operands, float32,
// bfloat16 and float16; then planes large enough for several tiles, filters
// whose input window shrinks the tiles, and the forward's bias + ReLU epilogue. Then conv2d and
// conv2d_bias_relu on each path LOOM_CONV_SMALL names (loom, cudnn, auto)
// under strict fp32, TF32 and bf16 autocast, against the CPU op, and a bias
// gradient too wide for the weight-gradient block, summed on its own. Last,
// the patch tier (filter == stride): conv2d and conv_transpose2d in random
// patch shapes and channel counts, on each path LOOM_CONV_PATCH names, every
// gradient, NCHW and channels-last activations, either filter layout.
//
// Tolerances, relative to the largest reference magnitude of each result:
// float32 kernels 1e-5 (at most 200-term products in the forward, fused
// multiply-adds; the weight gradient sums up to 5 * 28 * 28 terms in a fixed
// order); 16-bit outputs 8e-3 (one rounding to bfloat16, 2^-8 relative, on top
// of the float32 sums). The op test: strict fp32 1e-5, TF32 2e-3 (cuDNN's
// TF32 rounds operands to 10 mantissa bits), bf16 autocast 1.6e-2 (bf16
// operands and output).
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/cpu/conv.h"
#include "core/cuda/conv_small.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/fused.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

struct Case {
  int64_t C, K, R, stride, pad;
  int64_t N = 2, H = 17, W = 15;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (int64_t C : {1, 3, 4, 6, 8}) {
    for (int64_t K : {16, 12, 6, 5}) {
      for (int64_t R : {3, 5}) {
        for (int64_t stride : {1, 2}) {
          for (int64_t pad : {0, 1, 2}) all.push_back({C, K, R, stride, pad});
        }
      }
    }
  }
  for (int64_t C : {12, 16, 40, 64}) {
    for (int64_t K : {1, 2, 5, 8}) {
      for (int64_t stride : {1, 2}) {
        all.push_back({C, K, 1, stride, 0});
        all.push_back({C, K, 3, stride, 1});
      }
    }
  }
  return all;
}

// Returns false, checking nothing, for a case the kernels decline (too many
// threads or too much shared memory for this K and filter size).
bool check_case(const Case& c, DType dtype, MemoryFormat format, Generator& gen) {
  INFO("N ", c.N, " C ", c.C, " H ", c.H, " W ", c.W, " K ", c.K, " R=S ", c.R, " stride ", c.stride,
       " pad ", c.pad, " ", dtype_name(dtype), " channels_last ", format == MemoryFormat::ChannelsLast);
  const kernel::ConvParams p{.stride_h = c.stride, .stride_w = c.stride, .pad_h = c.pad, .pad_w = c.pad};
  const int64_t N = c.N, H = c.H, W = c.W;
  const int64_t P = cpu::conv_output_size(H, c.R, c.stride, c.pad, 1);
  const int64_t Q = cpu::conv_output_size(W, c.R, c.stride, c.pad, 1);
  const Tensor x = testing::exact_randn({N, c.C, H, W}, dtype, gen);
  const Tensor w = testing::exact_randn({c.K, c.C, c.R, c.R}, dtype, gen);
  const Tensor dy = testing::exact_randn({N, c.K, P, Q}, dtype, gen);
  const Tensor x64 = x.to(DType::Float64), w64 = w.to(DType::Float64), dy64 = dy.to(DType::Float64);
  Tensor y_ref = empty({N, c.K, P, Q}, {.dtype = DType::Float64});
  Tensor dw_ref = empty(w.sizes(), {.dtype = DType::Float64});
  cpu::conv2d_forward(y_ref.strided(), x64.strided(), w64.strided(), nullptr, p);
  cpu::conv2d_wgrad(dw_ref.strided(), dy64.strided(), x64.strided(), p);

  auto on_gpu = [&](const Tensor& t) { return t.to(testing::test_gpu()).to(dtype).contiguous(format); };
  const Tensor xg = on_gpu(x), wg = on_gpu(w), dyg = on_gpu(dy);
  if (!cuda::conv_small_supported(xg.strided(), wg.strided(), p)) return false;
  const Tensor y = full(y_ref.sizes(), 1e30, {.dtype = dtype, .device = testing::test_gpu()}).contiguous(format);
  const Tensor dw = full(w.sizes(), 1e30, {.dtype = dtype, .device = testing::test_gpu()}).contiguous(format);
  const cuda::Scratch need = cuda::conv_small_wgrad_scratch(dyg.strided(), dw.strided());
  const Tensor scratch = full({need.elements}, 1e30, {.dtype = need.dtype, .device = testing::test_gpu()});
  cuda::conv_small_forward(y.strided(), xg.strided(), wg.strided(), p);
  cuda::conv_small_wgrad(dw.strided(), dyg.strided(), xg.strided(), p, scratch.strided());
  const double tol = dtype == DType::Float32 ? 1e-5 : 8e-3;
  testing::check_scaled(y, y_ref, tol);
  testing::check_scaled(dw, dw_ref, tol);
  if (cuda::conv_small_dgrad_supported(dyg.strided(), wg.strided(), p)) {
    Tensor dx_ref = empty(x.sizes(), {.dtype = DType::Float64});
    cpu::conv2d_dgrad(dx_ref.strided(), dy64.strided(), w64.strided(), p);
    const Tensor dx = full(x.sizes(), 1e30, {.dtype = dtype, .device = testing::test_gpu()}).contiguous(format);
    cuda::conv_small_dgrad(dx.strided(), dyg.strided(), wg.strided(), p);
    testing::check_scaled(dx, dx_ref, tol);
  } else {
    CHECK(c.stride > 1);  // every stride-1 case here pads at most R - 1
  }
  if (cuda::conv_small_wgrad_takes_bias(dw.strided())) {
    // Again with the bias gradient summed alongside, into every other element
    // of a longer tensor (stride 2): dw keeps its bits, db matches the CPU.
    Tensor db_ref = empty({c.K}, {.dtype = DType::Float64});
    cpu::conv2d_bgrad(db_ref.strided(), dy64.strided());
    const Tensor dw2 = full(w.sizes(), 1e30, {.dtype = dtype, .device = testing::test_gpu()}).contiguous(format);
    const Tensor db_long = full({2 * c.K}, 1e30, {.dtype = dtype, .device = testing::test_gpu()});
    const Tensor db = db_long.slice(0, 0, 2 * c.K, 2);
    cuda::conv_small_wgrad(dw2.strided(), dyg.strided(), xg.strided(), p, scratch.strided(), db.strided());
    CHECK(testing::values(dw2.to(DType::Float32).cpu()) == testing::values(dw.to(DType::Float32).cpu()));
    // A channel's N * P * Q terms may cancel far below their own size (K = 1 leaves no larger channel to
    // scale by): the float32 sum's error is bounded by the terms' magnitudes, the rounding of the result by it.
    const double terms = max(sum(abs(dy64), {0, 2, 3})).item();
    CHECK_CLOSE(db.to(DType::Float64).cpu(), db_ref, tol, 1e-6 * terms);
  }
  return true;
}

// A numerics setting the conv2d path tests run under, and its tolerance.
struct PathSetting {
  const char* name;
  NumericsPolicy policy;
  bool autocast;  // bfloat16 autocast
  double tol;
};
const PathSetting kStrict{"strict", {.precision = Precision::StrictFp32}, false, 1e-5};
const PathSetting kTf32{"tf32", {.precision = Precision::Tf32}, false, 2e-3};
const PathSetting kBf16{"bf16", {.precision = Precision::Bf16}, true, 1.6e-2};

// The policy and autocast of a setting, for one scope.
struct SettingScope {
  explicit SettingScope(const PathSetting& s)
      : policy(s.policy),
        autocast(s.autocast ? std::optional<DType>(DType::BFloat16) : std::nullopt) {}
  NumericsGuard policy;
  AutocastGuard autocast;
};

// A copy of t that requires grad.
Tensor leaf(const Tensor& t) {
  Tensor l = t.clone();
  l.requires_grad_();
  return l;
}

}  // namespace

LOOM_GPU_TEST_CASE("small-channel conv kernels match the CPU: forward, data, weight and bias gradients") {
  Generator gen(1206);
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      int64_t supported = 0;
      for (const Case& c : cases()) supported += check_case(c, dtype, format, gen);
      CHECK(supported >= static_cast<int64_t>(cases().size()) * 3 / 4);
    }
  }
}

// Planes that take several tiles across and down, input windows that shrink
// the tiles (7x7 stride 2 on a wide plane) and a filter of 1x1 taps.
LOOM_GPU_TEST_CASE("small-channel conv kernels match the CPU on large planes") {
  Generator gen(1208);
  const Case large[] = {{.C = 3, .K = 64, .R = 3, .stride = 1, .pad = 1, .N = 3, .H = 36, .W = 40},
                        {.C = 3, .K = 16, .R = 7, .stride = 2, .pad = 3, .N = 2, .H = 75, .W = 83},
                        {.C = 1, .K = 6, .R = 5, .stride = 1, .pad = 2, .N = 5, .H = 28, .W = 28},
                        {.C = 4, .K = 5, .R = 1, .stride = 1, .pad = 0, .N = 2, .H = 9, .W = 300},
                        {.C = 2, .K = 24, .R = 4, .stride = 3, .pad = 2, .N = 1, .H = 130, .W = 7}};
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (const Case& c : large) CHECK(check_case(c, dtype, format, gen));
    }
  }
}

LOOM_GPU_TEST_CASE("the small-channel forward adds a bias and applies ReLU before rounding") {
  Generator gen(1209);
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (int64_t K : {16, 6, 5}) {
        INFO(dtype_name(dtype), " channels_last ", format == MemoryFormat::ChannelsLast, " K ", K);
        const kernel::ConvParams p{.pad_h = 2, .pad_w = 2};
        const Tensor x = testing::exact_randn({3, 1, 28, 28}, dtype, gen);
        const Tensor w = testing::exact_randn({K, 1, 5, 5}, dtype, gen);
        // Every other element of a longer tensor: a bias with stride 2.
        const Tensor b_long = testing::exact_randn({2 * K}, dtype, gen);
        const Tensor b = b_long.slice(0, 0, 2 * K, 2);
        Tensor y_ref = empty({3, K, 28, 28}, {.dtype = DType::Float64});
        const Tensor b64 = b.to(DType::Float64).contiguous();
        const Strided b_view = b64.strided();
        cpu::conv2d_forward(y_ref.strided(), x.to(DType::Float64).strided(), w.to(DType::Float64).strided(),
                            &b_view, p, /*relu=*/true);
        const Tensor xg = x.to(testing::test_gpu()).to(dtype).contiguous(format);
        const Tensor wg = w.to(testing::test_gpu()).to(dtype).contiguous(format);
        const Tensor bg = b_long.to(testing::test_gpu()).to(dtype).slice(0, 0, 2 * K, 2);
        REQUIRE(cuda::conv_small_supported(xg.strided(), wg.strided(), p));
        const Tensor y = full(y_ref.sizes(), 1e30, {.dtype = dtype, .device = testing::test_gpu()}).contiguous(format);
        cuda::conv_small_forward(y.strided(), xg.strided(), wg.strided(), p,
                                 {.bias = bg.strided(), .relu = true});
        testing::check_scaled(y, y_ref, dtype == DType::Float32 ? 1e-5 : 8e-3);
        const std::vector<double> v = testing::values(y.to(DType::Float32).cpu());
        CHECK(*std::min_element(v.begin(), v.end()) == 0.0);  // ReLU clipped something
      }
    }
  }
}

LOOM_GPU_TEST_CASE("the small-channel kernels decline what they were not built for") {
  const kernel::ConvParams plain{};
  auto supported = [](const Shape& x, const Shape& w, DType dtype, const kernel::ConvParams& p) {
    const Tensor xt = empty(x, {.dtype = dtype, .device = testing::test_gpu()});
    const Tensor wt = empty(w, {.dtype = dtype, .device = testing::test_gpu()});
    return cuda::conv_small_supported(xt.strided(), wt.strided(), p);
  };
  CHECK(supported({2, 3, 8, 8}, {64, 3, 3, 3}, DType::Float32, plain));
  CHECK(supported({2, 8, 8, 8}, {16, 8, 5, 5}, DType::Float32, plain));
  CHECK_FALSE(supported({2, 9, 8, 8}, {16, 9, 3, 3}, DType::Float32, plain));     // C > 8, K > 8
  CHECK(supported({2, 16, 8, 8}, {2, 16, 1, 1}, DType::Float32, plain));          // K <= 8, C <= 64
  CHECK(supported({2, 64, 8, 8}, {8, 64, 3, 3}, DType::Float32, plain));
  CHECK_FALSE(supported({2, 65, 8, 8}, {2, 65, 1, 1}, DType::Float32, plain));    // C > 64
  CHECK_FALSE(supported({2, 3, 8, 8}, {64, 3, 3, 3}, DType::Float64, plain));     // float64
  CHECK_FALSE(supported({2, 3, 8, 8}, {512, 3, 3, 3}, DType::Float32, plain));    // filter too big
  CHECK_FALSE(supported({2, 3, 8, 8}, {64, 3, 3, 3}, DType::Float32, {.dilation_h = 2}));
  // A 7x7x8 filter at column stride 40: its smallest input window and the
  // filter would need more than a block's 48 KiB of shared memory.
  CHECK(supported({1, 8, 9, 400}, {16, 8, 7, 7}, DType::Float32, {.stride_w = 2}));
  CHECK_FALSE(supported({1, 8, 9, 400}, {16, 8, 7, 7}, DType::Float32, {.stride_w = 40}));
  // The bias gradient rides along with up to one channel per thread of a
  // weight-gradient block: 224 threads for this filter, 256 for a 1x1x1 one.
  auto takes_bias = [](const Shape& w) {
    return cuda::conv_small_wgrad_takes_bias(empty(w, {.device = testing::test_gpu()}).strided());
  };
  CHECK(takes_bias({128, 3, 3, 3}));
  CHECK(supported({2, 1, 8, 8}, {1024, 1, 1, 1}, DType::Float32, plain));
  CHECK_FALSE(takes_bias({1024, 1, 1, 1}));
}

LOOM_GPU_TEST_CASE("conv2d's bias gradient is summed on its own where the small wgrad cannot take it") {
  Generator gen(1211);
  const testing::ScopedEnv loom("LOOM_CONV_SMALL", "loom");
  const NumericsGuard strict({.precision = Precision::StrictFp32});
  const Tensor x0 = randn({2, 1, 6, 5}, {}, &gen), w0 = randn({1024, 1, 1, 1}, {}, &gen);
  const Tensor b0 = randn({1024}, {}, &gen);
  Tensor w_ref = leaf(w0), b_ref = leaf(b0);
  const Tensor y_ref = conv2d(x0, w_ref, b_ref);
  const Tensor dy = randn(y_ref.sizes(), {}, &gen);
  y_ref.backward(dy);
  Tensor w = leaf(w0.to(testing::test_gpu())), b = leaf(b0.to(testing::test_gpu()));
  const Tensor y = conv2d(x0.to(testing::test_gpu()), w, b);
  y.backward(dy.to(testing::test_gpu()).contiguous(y.suggest_memory_format()));
  testing::check_scaled(y, y_ref, 1e-5);
  testing::check_scaled(w.grad(), w_ref.grad(), 1e-5);
  testing::check_scaled(b.grad(), b_ref.grad(), 1e-5);
}

LOOM_GPU_TEST_CASE("conv2d on each path LOOM_CONV_SMALL names matches the CPU, all gradients") {
  Generator gen(1207);
  for (const char* path : {"loom", "cudnn", "auto"}) {
    const testing::ScopedEnv env("LOOM_CONV_SMALL", path);
    for (const PathSetting& s : {kStrict, kTf32, kBf16}) {
      for (int64_t C : {1, 3}) {
        INFO(path, " ", s.name, " C ", C);
        const Conv2dOptions options{.stride = {1, 1}, .padding = {1, 1}};
        const Tensor x0 = testing::exact_randn({4, C, 12, 11}, DType::BFloat16, gen);
        const Tensor w0 = testing::exact_randn({16, C, 3, 3}, DType::BFloat16, gen);
        Tensor x_ref = leaf(x0), w_ref = leaf(w0);
        const Tensor y_ref = conv2d(x_ref, w_ref, Tensor(), options);
        const Tensor dy = testing::exact_randn(y_ref.sizes(), DType::BFloat16, gen);
        y_ref.backward(dy);

        const SettingScope scope(s);
        Tensor x = leaf(x0.to(testing::test_gpu())), w = leaf(w0.to(testing::test_gpu()));
        const Tensor y = conv2d(x, w, Tensor(), options);
        y.backward(dy.to(testing::test_gpu()).to(y.dtype()).contiguous(y.suggest_memory_format()));
        testing::check_scaled(y.to(DType::Float32), y_ref, s.tol);
        testing::check_scaled(x.grad(), x_ref.grad(), s.tol);
        testing::check_scaled(w.grad(), w_ref.grad(), s.tol);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("conv2d_bias_relu on each path LOOM_CONV_SMALL names matches the CPU, all gradients") {
  Generator gen(1210);
  for (const char* path : {"loom", "cudnn", "auto"}) {
    const testing::ScopedEnv env("LOOM_CONV_SMALL", path);
    for (const PathSetting& s : {kStrict, kBf16}) {
      for (int64_t C : {1, 6}) {
        INFO(path, " ", s.name, " C ", C);
        const Conv2dOptions options{.padding = {2, 2}};
        const Tensor x0 = testing::exact_randn({4, C, 14, 13}, DType::BFloat16, gen);
        const Tensor w0 = testing::exact_randn({16, C, 5, 5}, DType::BFloat16, gen);
        const Tensor b0 = testing::exact_randn({16}, DType::BFloat16, gen);
        Tensor x_ref = leaf(x0), w_ref = leaf(w0), b_ref = leaf(b0);
        const Tensor y_ref = conv2d_bias_relu(x_ref, w_ref, b_ref, options);
        const Tensor dy = testing::exact_randn(y_ref.sizes(), DType::BFloat16, gen);
        y_ref.backward(dy);

        const SettingScope scope(s);
        Tensor x = leaf(x0.to(testing::test_gpu())), w = leaf(w0.to(testing::test_gpu())),
               b = leaf(b0.to(testing::test_gpu()));
        const Tensor y = conv2d_bias_relu(x, w, b, options);
        y.backward(dy.to(testing::test_gpu()).to(y.dtype()).contiguous(y.suggest_memory_format()));
        testing::check_scaled(y.to(DType::Float32), y_ref, s.tol);
        testing::check_scaled(x.grad(), x_ref.grad(), s.tol);
        testing::check_scaled(w.grad(), w_ref.grad(), s.tol);
        testing::check_scaled(b.grad(), b_ref.grad(), s.tol);
      }
    }
  }
}

// Convolutions over non-overlapping patches (filter == stride) and the
// transposed ones that scatter each pixel to its patch: random patch sizes,
// channels, batches and planes, NCHW and channels-last (the tier takes only
// channels-last activations; its filters may lie either way), with a bias,
// through the patch tier (loom), cuDNN's strided kernels and the race between them.
LOOM_GPU_TEST_CASE("convolutions whose filter is their stride match the CPU on each path LOOM_CONV_PATCH names") {
  Generator gen(1211);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return static_cast<int64_t>(randint(lo, hi + 1, {1}, {}, &gen).item());
  };
  for (const char* path : {"loom", "cudnn", "auto"}) {
    const testing::ScopedEnv env("LOOM_CONV_PATCH", path);
    for (int index = 0; index < 16; ++index) {
      const PathSetting& s = index % 3 == 0 ? kStrict : index % 3 == 1 ? kTf32 : kBf16;
      const bool transposed = index % 2 == 1;
      const MemoryFormat format = index % 4 == 0 ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast;
      const MemoryFormat w_format = index % 8 < 4 ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast;
      const int64_t R = pick(1, 4), S = R == 1 ? pick(2, 3) : pick(1, 4), C = pick(1, 40), K = pick(1, 40);
      const int64_t N = pick(1, 3), P = pick(1, 6), Q = pick(1, 6);
      INFO(path, " ", s.name, transposed ? " conv_transpose2d" : " conv2d", " N ", N, " C ", C, " K ", K,
           " patch ", R, "x", S, " plane ", P, "x", Q, " channels_last ", format == MemoryFormat::ChannelsLast,
           " filter channels_last ", w_format == MemoryFormat::ChannelsLast);
      const Size2 stride{R, S};
      const Shape x_shape = transposed ? Shape{N, C, P, Q} : Shape{N, C, P * R, Q * S};
      const Shape w_shape = transposed ? Shape{C, K, R, S} : Shape{K, C, R, S};
      const Tensor x0 = testing::exact_randn(x_shape, DType::BFloat16, gen).contiguous(format);
      const Tensor w0 = testing::exact_randn(w_shape, DType::BFloat16, gen).contiguous(w_format);
      const Tensor b0 = testing::exact_randn({K}, DType::BFloat16, gen);
      const auto run = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
        return transposed ? conv_transpose2d(x, w, b, {.stride = stride}) : conv2d(x, w, b, {.stride = stride});
      };
      Tensor x_ref = leaf(x0), w_ref = leaf(w0), b_ref = leaf(b0);
      const Tensor y_ref = run(x_ref, w_ref, b_ref);
      const Tensor dy = testing::exact_randn(y_ref.sizes(), DType::BFloat16, gen);
      y_ref.backward(dy);

      const SettingScope scope(s);
      Tensor x = leaf(x0.to(testing::test_gpu())), w = leaf(w0.to(testing::test_gpu())),
             b = leaf(b0.to(testing::test_gpu()));
      const Tensor y = run(x, w, b);
      REQUIRE(y.sizes() == y_ref.sizes());
      y.backward(dy.to(testing::test_gpu()).to(y.dtype()).contiguous(y.suggest_memory_format()));
      testing::check_scaled(y.to(DType::Float32), y_ref, s.tol);
      testing::check_scaled(x.grad(), x_ref.grad(), s.tol);
      testing::check_scaled(w.grad(), w_ref.grad(), s.tol);
      testing::check_scaled(b.grad(), b_ref.grad(), s.tol);
    }
  }
}

#endif  // LOOM_WITH_CUDA
