// File: tests/core/cudnn/conv_legacy_gpu_test.cc
// The legacy-API convolution tier (conv_legacy.h), called directly: forward,
// dgrad and wgrad on random configurations (groups, depthwise, stride,
// padding, dilation, NCHW and NHWC) against the float64 CPU reference, under
// strict fp32 (1e-4 of the largest value) and tf32 (1e-2), deterministic or not.
// The non-fused Winograd algorithm strict fp32 admits for dgrad and wgrad: on
// resnet9's shapes and at the longest sums it is admitted for, against a
// float64 reference, within strict fp32's gradient tolerance; and through
// conv.h's race, forced each way.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/cpu/conv.h"
#include "core/cudnn/conv.h"
#include "core/cudnn/conv_legacy.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

double relative_error(const Tensor& a, const Tensor& ref) {
  const std::vector<double> va = testing::values(a), vr = testing::values(ref);
  double diff = 0, scale = 1e-3;
  for (size_t i = 0; i < vr.size(); ++i) {
    diff = std::isnan(va[i]) ? INFINITY : std::max(diff, std::abs(va[i] - vr[i]));
    scale = std::max(scale, std::abs(vr[i]));
  }
  return diff / scale;
}

Tensor on_gpu(const Tensor& t, MemoryFormat format) {
  return t.to(DType::Float32).to(testing::test_gpu()).contiguous(format);
}

// One convolution's operands on the GPU, fp32 and float64 (the reference's).
struct Operands {
  Tensor x, w, dy, x64, w64, dy64;
};

Operands random_operands(int64_t n, int64_t c, int64_t k, int64_t h, int64_t w, MemoryFormat format,
                         Generator* gen) {
  Operands o;
  const Device gpu = testing::test_gpu();
  o.x64 = randn({n, c, h, w}, {.dtype = DType::Float64, .device = gpu}, gen).contiguous(format);
  o.w64 = randn({k, c, 3, 3}, {.dtype = DType::Float64, .device = gpu}, gen).contiguous(format);
  o.dy64 = randn({n, k, h, w}, {.dtype = DType::Float64, .device = gpu}, gen).contiguous(format);
  o.x = o.x64.to(DType::Float32);
  o.w = o.w64.to(DType::Float32);
  o.dy = o.dy64.to(DType::Float32);
  return o;
}

constexpr kernel::ConvParams kSame3x3{.pad_h = 1, .pad_w = 1};

// dgrad (dx) or wgrad (dw) of a 3x3, stride-1, padding-1 convolution by `run`
// (conv2d_legacy or conv2d_winograd), as float64 on the CPU.
template <class Run>
Tensor gradient(cudnn::ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& dy, Run run) {
  Tensor out = empty_like(direction == cudnn::ConvDirection::BackwardData ? x : w);
  const Strided xs = direction == cudnn::ConvDirection::BackwardData ? out.strided() : x.strided();
  const Strided ws = direction == cudnn::ConvDirection::BackwardData ? w.strided() : out.strided();
  CHECK(run(direction, xs, ws, dy.strided(), kSame3x3) == "");
  return out.to(DType::Float64).cpu();
}

}  // namespace

LOOM_GPU_TEST_CASE("the legacy convolution tier matches the CPU in every direction") {
  Generator gen(77);
  const int64_t configs[][10] = {
      // N, C, K, groups, H, W, R, S, stride, dilation (padding = R / 2)
      {4, 3, 8, 1, 13, 11, 3, 3, 1, 1}, {2, 6, 6, 6, 17, 9, 5, 3, 2, 1},
      {3, 12, 9, 3, 10, 12, 3, 5, 1, 2}, {1, 29, 14, 1, 7, 19, 1, 7, 3, 1},
      {5, 4, 12, 2, 21, 8, 7, 1, 2, 2},
  };
  for (const auto& cfg : configs) {
    const int64_t n = cfg[0], c = cfg[1], k = cfg[2], g = cfg[3], h = cfg[4], w = cfg[5];
    const int64_t r = cfg[6], s = cfg[7], stride = cfg[8], dil = cfg[9];
    const kernel::ConvParams p{.stride_h = stride, .stride_w = stride, .pad_h = r / 2, .pad_w = s / 2,
                            .dilation_h = dil, .dilation_w = dil, .groups = g};
    const int64_t pp = cpu::conv_output_size(h, r, stride, r / 2, dil);
    const int64_t q = cpu::conv_output_size(w, s, stride, s / 2, dil);
    Tensor x = randn({n, c, h, w}, {.dtype = DType::Float64}, &gen);
    Tensor wt = randn({k, c / g, r, s}, {.dtype = DType::Float64}, &gen);
    Tensor dy = randn({n, k, pp, q}, {.dtype = DType::Float64}, &gen);
    Tensor y_ref = empty({n, k, pp, q}, {.dtype = DType::Float64});
    Tensor dx_ref = empty({n, c, h, w}, {.dtype = DType::Float64});
    Tensor dw_ref = empty({k, c / g, r, s}, {.dtype = DType::Float64});
    cpu::conv2d_forward(y_ref.strided(), x.strided(), wt.strided(), nullptr, p);
    cpu::conv2d_dgrad(dx_ref.strided(), dy.strided(), wt.strided(), p);
    cpu::conv2d_wgrad(dw_ref.strided(), dy.strided(), x.strided(), p);
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (Precision precision : {Precision::StrictFp32, Precision::Tf32}) {
        for (bool deterministic : {false, true}) {
          CAPTURE(c);
          CAPTURE(memory_format_name(format));
          CAPTURE(precision_name(precision));
          CAPTURE(deterministic);
          NumericsGuard policy({.precision = precision, .deterministic = deterministic});
          const double tolerance = precision == Precision::StrictFp32 ? 1e-4 : 1e-2;
          Tensor gx = on_gpu(x, format), gw = on_gpu(wt, format), gdy = on_gpu(dy, format);
          Tensor gy = on_gpu(full({n, k, pp, q}, NAN, {.dtype = DType::Float64}), format);
          Tensor gdx = on_gpu(full({n, c, h, w}, NAN, {.dtype = DType::Float64}), format);
          Tensor gdw = on_gpu(full({k, c / g, r, s}, NAN, {.dtype = DType::Float64}), format);
          CHECK(cudnn::conv2d_legacy(cudnn::ConvDirection::Forward, gx.strided(), gw.strided(),
                                     gy.strided(), p) == "");
          CHECK(cudnn::conv2d_legacy(cudnn::ConvDirection::BackwardData, gdx.strided(), gw.strided(),
                                     gdy.strided(), p) == "");
          CHECK(cudnn::conv2d_legacy(cudnn::ConvDirection::BackwardFilter, gx.strided(),
                                     gdw.strided(), gdy.strided(), p) == "");
          CHECK(relative_error(gy.to(DType::Float64).cpu(), y_ref) <= tolerance);
          CHECK(relative_error(gdx.to(DType::Float64).cpu(), dx_ref) <= tolerance);
          CHECK(relative_error(gdw.to(DType::Float64).cpu(), dw_ref) <= tolerance);
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("non-fused Winograd dgrad and wgrad stay within strict fp32's tolerance where admitted") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  Generator gen(2026);
  const int64_t shapes[][5] = {
      // N, C, K, H = W: resnet9's 3x3 convolutions at batch 128 (but its 3-channel first)
      {128, 64, 128, 32},
      {128, 128, 128, 16},
      {128, 128, 256, 16},
      {128, 256, 512, 8},
      {128, 512, 512, 4},
      // the longest sums admitted: N P Q = 2^18 (wgrad), K R S = 16,380 (dgrad)
      {256, 32, 32, 32},
      {4, 16, 1820, 8},
  };
  for (const auto& s : shapes) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      CAPTURE(s[0]);
      CAPTURE(s[1]);
      CAPTURE(s[2]);
      CAPTURE(s[3]);
      CAPTURE(memory_format_name(format));
      const Operands o = random_operands(s[0], s[1], s[2], s[3], s[3], format, &gen);
      for (cudnn::ConvDirection direction : {cudnn::ConvDirection::BackwardData, cudnn::ConvDirection::BackwardFilter}) {
        CAPTURE(static_cast<int>(direction));
        Tensor ref = gradient(direction, o.x64, o.w64, o.dy64, cudnn::conv2d_legacy);
        Tensor winograd = gradient(direction, o.x, o.w, o.dy, cudnn::conv2d_winograd);
        const double error = relative_error(winograd, ref);
        MESSAGE("winograd N ", s[0], " C ", s[1], " K ", s[2], " H ", s[3], " direction ",
                static_cast<int>(direction), ": error ", error);
        CHECK(error <= testing::kStrictFp32Parity.bwd);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("Winograd is admitted only under strict, non-deterministic fp32, for 3x3 backward sums in bounds") {
  const Device gpu = testing::test_gpu();
  auto t = [&](Shape sizes, DType dtype = DType::Float32) { return empty(sizes, {.dtype = dtype, .device = gpu}); };
  const Tensor x = t({4, 16, 8, 8}), w = t({32, 16, 3, 3}), y = t({4, 32, 8, 8});
  using cudnn::ConvDirection;
  using cudnn::winograd_admitted;
  {
    NumericsGuard tf32({.precision = Precision::Tf32});
    CHECK_FALSE(winograd_admitted(ConvDirection::BackwardData, x.strided(), w.strided(), y.strided()));
  }
  {
    NumericsGuard deterministic({.precision = Precision::StrictFp32, .deterministic = true});
    CHECK_FALSE(winograd_admitted(ConvDirection::BackwardData, x.strided(), w.strided(), y.strided()));
  }
  NumericsGuard strict({.precision = Precision::StrictFp32});
  CHECK(winograd_admitted(ConvDirection::BackwardData, x.strided(), w.strided(), y.strided()));
  CHECK(winograd_admitted(ConvDirection::BackwardFilter, x.strided(), w.strided(), y.strided()));
  CHECK_FALSE(winograd_admitted(ConvDirection::Forward, x.strided(), w.strided(), y.strided()));
  const Tensor x64 = t({4, 16, 8, 8}, DType::Float64);
  CHECK_FALSE(winograd_admitted(ConvDirection::BackwardData, x64.strided(), w.strided(), y.strided()));
  const Tensor grouped = t({32, 8, 3, 3});
  CHECK_FALSE(winograd_admitted(ConvDirection::BackwardFilter, x.strided(), grouped.strided(), y.strided()));
  // Only 3x3 filters: the bounds were measured on them, and a 5x5 wgrad far inside them broke the tolerance.
  const Tensor five = t({32, 16, 5, 5}), five_y = t({4, 32, 6, 6});
  CHECK_FALSE(winograd_admitted(ConvDirection::BackwardFilter, x.strided(), five.strided(), five_y.strided()));
  CHECK_FALSE(winograd_admitted(ConvDirection::BackwardData, x.strided(), five.strided(), five_y.strided()));
  // One past each bound: K R S = 1,821 * 9 > 2^14; N P Q = 257 * 32 * 32 > 2^18.
  const Tensor wide = t({1821, 16, 3, 3}), wide_y = t({4, 1821, 8, 8});
  CHECK_FALSE(winograd_admitted(ConvDirection::BackwardData, x.strided(), wide.strided(), wide_y.strided()));
  const Tensor big_x = t({257, 16, 32, 32}), big_y = t({257, 32, 32, 32});
  CHECK_FALSE(winograd_admitted(ConvDirection::BackwardFilter, big_x.strided(), w.strided(), big_y.strided()));
  const Tensor edge_x = t({256, 16, 32, 32}), edge_y = t({256, 32, 32, 32});
  CHECK(winograd_admitted(ConvDirection::BackwardFilter, edge_x.strided(), w.strided(), edge_y.strided()));
}

// LOOM_CONV_WINOGRAD for the scope.
LOOM_GPU_TEST_CASE("conv.h's strict dgrad and wgrad run Winograd or the graph plan, each within tolerance") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  Generator gen(9);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    CAPTURE(memory_format_name(format));
    const Operands o = random_operands(16, 64, 96, 16, 16, format, &gen);
    for (cudnn::ConvDirection direction : {cudnn::ConvDirection::BackwardData, cudnn::ConvDirection::BackwardFilter}) {
      CAPTURE(static_cast<int>(direction));
      auto through_conv_h = [](cudnn::ConvDirection d, const Strided& x, const Strided& w, const Strided& dy,
                               const kernel::ConvParams& p) {
        const bool ran = d == cudnn::ConvDirection::BackwardData ? cudnn::conv2d_dgrad(x, dy, w, p)
                                                                 : cudnn::conv2d_wgrad(w, dy, x, p);
        return ran ? std::string() : std::string("did not run");
      };
      Tensor ref = gradient(direction, o.x64, o.w64, o.dy64, cudnn::conv2d_legacy);
      Tensor by_path[2];
      for (int winograd : {0, 1}) {
        const testing::ScopedEnv env("LOOM_CONV_WINOGRAD", winograd ? "winograd" : "graph");
        by_path[winograd] = gradient(direction, o.x, o.w, o.dy, through_conv_h);
        CHECK(relative_error(by_path[winograd], ref) <= testing::kStrictFp32Parity.bwd);
      }
      // The transforms round differently from the graph's FMA kernels: Winograd ran.
      CHECK(relative_error(by_path[1], by_path[0]) > 0);
    }
  }
}
#endif
