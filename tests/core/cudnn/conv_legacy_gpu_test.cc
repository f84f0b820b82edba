// File: tests/core/cudnn/conv_legacy_gpu_test.cc
// The legacy-API convolution tier (conv_legacy.h), called directly: forward,
// dgrad and wgrad on random configurations (groups, depthwise, stride,
// padding, dilation, NCHW and NHWC) against the float64 CPU reference, under
// strict fp32 (1e-4 of the largest value) and tf32 (1e-2), deterministic or not.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>

#include "core/cpu/conv.h"
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
#endif
