// File: tests/core/cuda/layer_norm_gpu_test.cc
// The GPU's row layer-norm kernels against the CPU's (core/cpu/layer_norm.h)
// in float64 on the same values, over random configurations: rows from none to
// thousands (one group of column sums and many), widths around the warp's 32,
// every floating dtype, weight and bias present or absent, parameter gradients
// asked or not; the same bits on a second run; the checks' messages. GPU
// outputs start as NaN, so a value never written fails.
//
// N rows, D values per row. Tolerances, against float64: float64 1e-11; float32
// 2e-5 (the row sums in float over up to ~2k values), and the column sums over
// N rows atol 1e-6 * N; float16 and bfloat16 one rounding of the output plus
// their inputs' rounding carried through a row's sums (4e-3 and 3e-2).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <limits>
#include <optional>
#include <random>

#include "core/cpu/layer_norm.h"
#include "core/cuda/layer_norm.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/ops/compare.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kEps = 1e-5;

struct Config {
  int64_t n, d;
  DType dtype;
  bool weight, bias, params;
};

Config random_config(std::mt19937& rng) {
  constexpr int64_t kRows[] = {0, 1, 2, 7, 33, 129, 1000, 4099};
  constexpr int64_t kWidths[] = {1, 2, 31, 32, 33, 64, 100, 257, 768, 2049};
  constexpr DType kDtypes[] = {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16};
  auto pick = [&rng](int64_t count) { return std::uniform_int_distribution<int64_t>(0, count - 1)(rng); };
  return {kRows[pick(8)], kWidths[pick(10)], kDtypes[pick(4)], pick(2) == 1, pick(2) == 1, pick(3) != 0};
}

double rtol_of(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 1e-11;
    case DType::Float32: return 2e-5;
    case DType::Float16: return 4e-3;
    default: return 3e-2;
  }
}

Tensor nan_gpu(const Shape& sizes, DType dtype) {
  return full(sizes, kNaN, {.dtype = dtype, .device = testing::test_gpu()});
}

std::optional<Strided> strided_if(bool present, const Tensor& t) {
  return present ? std::optional<Strided>(t.strided()) : std::nullopt;
}

// One configuration: the GPU in its dtype, the CPU in float64 on the same
// (rounded) values; returns the GPU's outputs for the bitwise rerun.
std::vector<Tensor> run_and_check(const Config& c, Generator& gen) {
  const DType dtype = c.dtype;
  const DType stats_dtype = is_half_precision(dtype) ? DType::Float32 : dtype;
  // An offset of 3 makes a one-pass variance lose digits; the kernels take two passes.
  const Tensor x = (randn({c.n, c.d}, {}, &gen) * 2.0 + 3.0).to(dtype);
  const Tensor dy = randn({c.n, c.d}, {}, &gen).to(dtype);
  const Tensor w = randn({c.d}, {}, &gen).to(dtype), b = randn({c.d}, {}, &gen).to(dtype);
  const auto on_gpu = [](const Tensor& t) { return t.to(testing::test_gpu()); };
  const Tensor gx = on_gpu(x), gdy = on_gpu(dy), gw = on_gpu(w), gb = on_gpu(b);
  Tensor y = nan_gpu({c.n, c.d}, dtype), mean = nan_gpu({c.n}, stats_dtype), invstd = nan_gpu({c.n}, stats_dtype);
  Tensor dx = nan_gpu({c.n, c.d}, dtype), dw = nan_gpu({c.d}, dtype), db = nan_gpu({c.d}, dtype);
  cuda::layer_norm_forward(y.strided(), mean.strided(), invstd.strided(), gx.strided(), strided_if(c.weight, gw),
                           strided_if(c.bias, gb), kEps);
  cuda::layer_norm_backward(dx.strided(), strided_if(c.params, dw), strided_if(c.params, db), gdy.strided(),
                            gx.strided(), mean.strided(), invstd.strided(), strided_if(c.weight, gw));

  const auto f64 = [](const Tensor& t) { return t.to(DType::Float64).contiguous(); };
  const Tensor cx = f64(x), cdy = f64(dy), cw = f64(w), cb = f64(b);
  Tensor ry = empty({c.n, c.d}, {.dtype = DType::Float64}), rmean = empty({c.n}, {.dtype = DType::Float64});
  Tensor rinvstd = empty({c.n}, {.dtype = DType::Float64}), rdx = empty({c.n, c.d}, {.dtype = DType::Float64});
  Tensor rdw = empty({c.d}, {.dtype = DType::Float64}), rdb = empty({c.d}, {.dtype = DType::Float64});
  cpu::layer_norm_forward(ry.strided(), rmean.strided(), rinvstd.strided(), cx.strided(), strided_if(c.weight, cw),
                          strided_if(c.bias, cb), kEps);
  cpu::layer_norm_backward(rdx.strided(), rdw.strided(), rdb.strided(), cdy.strided(), cx.strided(),
                           rmean.strided(), rinvstd.strided(), strided_if(c.weight, cw));

  const double rtol = rtol_of(dtype);
  const double stats_rtol = std::max(rtol_of(stats_dtype), 1e-11);
  CHECK_CLOSE(y.cpu(), ry, rtol, rtol);
  CHECK_CLOSE(mean.cpu(), rmean, stats_rtol, stats_rtol);
  CHECK_CLOSE(invstd.cpu(), rinvstd, stats_rtol, stats_rtol);
  CHECK_CLOSE(dx.cpu(), rdx, rtol, rtol);
  if (c.params) {
    const double sum_atol = std::max(rtol, (dtype == DType::Float64 ? 1e-13 : 1e-6) * static_cast<double>(c.n));
    CHECK_CLOSE(dw.cpu(), rdw, rtol, sum_atol);
    CHECK_CLOSE(db.cpu(), rdb, rtol, sum_atol);
  }
  return {y, mean, invstd, dx, dw, db};
}

}  // namespace

LOOM_GPU_TEST_CASE("cuda layer norm matches the CPU's in float64 on random configurations, with the same bits twice") {
  std::mt19937 rng(2026);
  for (int i = 0; i < 64; ++i) {
    const Config c = random_config(rng);
    CAPTURE(i);
    CAPTURE(c.n);
    CAPTURE(c.d);
    CAPTURE(dtype_name(c.dtype));
    CAPTURE(c.weight);
    CAPTURE(c.bias);
    CAPTURE(c.params);
    const std::vector<Tensor> first = [&] { Generator gen(100 + i); return run_and_check(c, gen); }();
    const std::vector<Tensor> second = [&] { Generator gen(100 + i); return run_and_check(c, gen); }();
    for (size_t k = 0; k < first.size(); ++k) {
      if (!c.params && k >= 4) break;  // dweight and dbias were not asked for: left NaN
      CHECK(equal(first[k].cpu(), second[k].cpu()));
    }
  }
}

LOOM_GPU_TEST_CASE("cuda layer norm with no rows writes zero parameter gradients") {
  Tensor x = empty({0, 5}, {.device = testing::test_gpu()});
  Tensor dw = nan_gpu({5}, DType::Float32), db = nan_gpu({5}, DType::Float32);
  Tensor stats = empty({0}, {.device = testing::test_gpu()});
  cuda::layer_norm_backward(x.strided(), dw.strided(), db.strided(), x.strided(), x.strided(), stats.strided(),
                            stats.strided(), std::nullopt);
  CHECK_CLOSE(dw.cpu(), zeros({5}), 0.0, 0.0);
  CHECK_CLOSE(db.cpu(), zeros({5}), 0.0, 0.0);
}

LOOM_GPU_TEST_CASE("cuda layer norm names the operand that does not fit") {
  const Device gpu = testing::test_gpu();
  Tensor x = randn({4, 6}, {.device = gpu}), y = empty({4, 6}, {.device = gpu});
  Tensor mean = empty({4}, {.device = gpu}), invstd = empty({4}, {.device = gpu});
  Tensor half_w = empty({6}, {.dtype = DType::BFloat16, .device = gpu});
  CHECK_THROWS_WITH_FRAGMENT(cuda::layer_norm_forward(y.strided(), mean.strided(), invstd.strided(),
                                                      x.transpose(0, 1).strided(), std::nullopt, std::nullopt, kEps),
                             ShapeError, "x must be dense (6, 4) rows");
  CHECK_THROWS_WITH_FRAGMENT(cuda::layer_norm_forward(y.strided(), mean.strided(), invstd.strided(), x.strided(),
                                                      half_w.strided(), std::nullopt, kEps),
                             TypeError, "weight must be float32");
  Tensor bf16 = x.to(DType::BFloat16), bf16_mean = empty({4}, {.dtype = DType::BFloat16, .device = gpu});
  CHECK_THROWS_WITH_FRAGMENT(cuda::layer_norm_forward(bf16.strided(), bf16_mean.strided(), invstd.strided(),
                                                      bf16.strided(), std::nullopt, std::nullopt, kEps),
                             TypeError, "mean must be float32");
}
#endif
