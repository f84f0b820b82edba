// File: tests/core/cuda/layer_norm_gpu_test.cc
// The GPU's row layer-norm kernels against the CPU's (core/cpu/layer_norm.h)
// in float64 on the same values, over random configurations: rows from none to
// thousands (one group of column sums and many), widths around the warp's 32,
// every floating dtype, weight and bias present or absent, parameter gradients
// asked or not; the same bits on a second run; the checks' messages. GPU
// outputs start as NaN, so a value never written fails.
//
// N rows, D values per row. Tolerances, against float64: a relative one, for
// the output's rounding (float64 1e-11, float32 2e-5, float16 4e-3, bfloat16
// 3e-2; 16-bit inputs are rounded alike on both sides), plus 256 units of the
// compute dtype's roundoff times each value's row conditioning (bounds_of).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

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

// How far each output may move per unit of rounding error: float arithmetic on
// a row whose values sit far from its mean (|x| large against the spread, a
// condition cond = max |x| * invstd) loses digits in x - mean whatever the
// order, and everything after carries that loss: each bound is cond times what
// the loss is multiplied by (and the sums' magnitudes).
struct Bounds {
  std::vector<double> y, mean, invstd, dx, dweight, dbias;
};

Bounds bounds_of(const Config& c, const Tensor& x, const Tensor& dy, const Tensor& w, const Tensor& invstd) {
  const double *px = x.data_ptr<double>(), *pdy = dy.data_ptr<double>(), *pw = w.data_ptr<double>();
  const double* ps = invstd.data_ptr<double>();
  const auto weight = [&](int64_t j) { return c.weight ? std::abs(pw[j]) : 1.0; };
  Bounds b{std::vector<double>(c.n * c.d), std::vector<double>(c.n), std::vector<double>(c.n),
           std::vector<double>(c.n * c.d), std::vector<double>(c.d, 0.0), std::vector<double>(c.d, 0.0)};
  for (int64_t r = 0; r < c.n; ++r) {
    double x_max = 0.0, g_max = 0.0, mean = 0.0;
    for (int64_t j = 0; j < c.d; ++j) {
      x_max = std::max(x_max, std::abs(px[r * c.d + j]));
      g_max = std::max(g_max, std::abs(pdy[r * c.d + j]) * weight(j));
      mean += px[r * c.d + j] / static_cast<double>(c.d);
    }
    const double cond = std::max(1.0, x_max * ps[r]);
    b.mean[r] = x_max;
    b.invstd[r] = cond * ps[r];
    for (int64_t j = 0; j < c.d; ++j) {
      const int64_t i = r * c.d + j;
      const double xhat = std::abs((px[i] - mean) * ps[r]);
      b.y[i] = cond * (1.0 + xhat) * weight(j);
      b.dx[i] = 4.0 * cond * ps[r] * g_max * (1.0 + xhat);
      b.dweight[j] += std::abs(pdy[i]) * cond * (1.0 + xhat);
      b.dbias[j] += std::abs(pdy[i]);
    }
  }
  return b;
}

// CHECKs |actual - expected| <= rtol * |expected| + kUlps * eps * bound
// elementwise, eps the unit roundoff the kernels compute in (actual on the GPU,
// the rest float64 on the CPU), reporting the worst.
void check_within(const Tensor& actual, const Tensor& expected, const std::vector<double>& bound, double rtol,
                  double eps, const char* what) {
  constexpr double kUlps = 256;
  const Tensor a = actual.cpu().to(DType::Float64).contiguous();
  const double *pa = a.data_ptr<double>(), *pe = expected.data_ptr<double>();
  int64_t outside = 0, worst = -1;
  double worst_excess = 0.0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double allowed = rtol * std::abs(pe[i]) + kUlps * eps * bound[static_cast<size_t>(i)];
    const double error = std::abs(pa[i] - pe[i]);
    if (!(error <= allowed)) {  // NaN counts as outside
      ++outside;
      if (worst < 0 || !(error - allowed <= worst_excess)) worst_excess = error - allowed, worst = i;
    }
  }
  CHECK_MESSAGE(outside == 0, std::string(what) << ": " << outside << " of " << expected.numel()
                                                << " outside; worst [" << worst << "] "
                                                << (worst >= 0 ? pa[worst] : 0.0) << " against "
                                                << (worst >= 0 ? pe[worst] : 0.0));
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

  const Bounds bounds = bounds_of(c, cx, cdy, cw, rinvstd);
  const double rtol = rtol_of(dtype), stats_rtol = rtol_of(stats_dtype);
  const double eps = stats_dtype == DType::Float64 ? 0x1p-53 : 0x1p-24;  // what the kernels compute in
  check_within(y, ry, bounds.y, rtol, eps, "y");
  check_within(mean, rmean, bounds.mean, stats_rtol, eps, "mean");
  check_within(invstd, rinvstd, bounds.invstd, stats_rtol, eps, "invstd");
  check_within(dx, rdx, bounds.dx, rtol, eps, "dx");
  if (c.params) {
    check_within(dw, rdw, bounds.dweight, rtol, eps, "dweight");
    check_within(db, rdb, bounds.dbias, rtol, eps, "dbias");
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
