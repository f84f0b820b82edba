// File: tests/core/cpu/layer_norm_test.cc
// The row layer-norm kernels against naive per-row formulas in double, on raw
// buffers and random configurations, float32 and float64; the same bits at one
// and two threads; the shape check's message.
//
// N rows, D values per row.
#include "core/cpu/layer_norm.h"

#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "tests/testing.h"

namespace loom::cpu {
namespace {

std::vector<double> random_values(int64_t count, std::mt19937& rng, double mean = 0.0) {
  std::normal_distribution<double> normal(mean, 1.0);
  std::vector<double> out(static_cast<size_t>(count));
  for (double& v : out) v = normal(rng);
  return out;
}

template <class T>
Strided view(std::vector<T>& values, Shape sizes) {
  Shape strides = sizes.size() == 2 ? Shape{sizes[1], 1} : Shape{1};
  return Strided{values.data(), std::is_same_v<T, float> ? DType::Float32 : DType::Float64, sizes, strides};
}

// What the kernels should give, row by row in double.
struct Expected {
  std::vector<double> y, dx, dweight, dbias;
};

Expected naive(const std::vector<double>& x, const std::vector<double>& dy, const std::vector<double>& w,
               const std::vector<double>& b, int64_t n, int64_t d, double eps) {
  Expected e{std::vector<double>(x.size()), std::vector<double>(x.size()), std::vector<double>(d, 0.0),
             std::vector<double>(d, 0.0)};
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0.0, var = 0.0, mean_g = 0.0, mean_g_xhat = 0.0;
    for (int64_t j = 0; j < d; ++j) mean += x[r * d + j] / static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) var += (x[r * d + j] - mean) * (x[r * d + j] - mean) / static_cast<double>(d);
    const double invstd = 1.0 / std::sqrt(var + eps);
    auto xhat = [&](int64_t j) { return (x[r * d + j] - mean) * invstd; };
    for (int64_t j = 0; j < d; ++j) {
      const double g = dy[r * d + j] * w[j];
      mean_g += g / static_cast<double>(d);
      mean_g_xhat += g * xhat(j) / static_cast<double>(d);
      e.y[r * d + j] = xhat(j) * w[j] + b[j];
      e.dweight[j] += dy[r * d + j] * xhat(j);
      e.dbias[j] += dy[r * d + j];
    }
    for (int64_t j = 0; j < d; ++j) e.dx[r * d + j] = invstd * (dy[r * d + j] * w[j] - mean_g - xhat(j) * mean_g_xhat);
  }
  return e;
}

template <class T>
double max_abs_diff(const std::vector<T>& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(actual[i]) - expected[i]));
  }
  return worst;
}

// One configuration's outputs from the kernels.
template <class T>
struct Outputs {
  std::vector<T> y, mean, invstd, dx, dweight, dbias;
};

template <class T>
Outputs<T> run(const std::vector<double>& x64, const std::vector<double>& dy64, const std::vector<double>& w64,
               const std::vector<double>& b64, int64_t n, int64_t d, bool affine, double eps) {
  std::vector<T> x(x64.begin(), x64.end()), dy(dy64.begin(), dy64.end()), w(w64.begin(), w64.end()),
      b(b64.begin(), b64.end());
  Outputs<T> o{std::vector<T>(x.size()), std::vector<T>(n), std::vector<T>(n), std::vector<T>(x.size()),
               std::vector<T>(d), std::vector<T>(d)};
  const std::optional<Strided> weight = affine ? std::optional(view(w, {d})) : std::nullopt;
  const std::optional<Strided> bias = affine ? std::optional(view(b, {d})) : std::nullopt;
  layer_norm_forward(view(o.y, {n, d}), view(o.mean, {n}), view(o.invstd, {n}), view(x, {n, d}), weight, bias, eps);
  layer_norm_backward(view(o.dx, {n, d}), view(o.dweight, {d}), view(o.dbias, {d}), view(dy, {n, d}),
                      view(x, {n, d}), view(o.mean, {n}), view(o.invstd, {n}), weight);
  return o;
}

}  // namespace

TEST_CASE_TEMPLATE("layer_norm kernels match per-row formulas on random configurations", T, float, double) {
  std::mt19937 rng(34);
  const double tolerance = std::is_same_v<T, float> ? 2e-4 : 1e-11;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 300)(rng);
    const int64_t d = std::uniform_int_distribution<int64_t>(1, 160)(rng);
    const bool affine = trial % 3 != 0;
    const double eps = trial % 2 == 0 ? 1e-5 : 1e-6;
    CAPTURE(n);
    CAPTURE(d);
    CAPTURE(affine);
    // An offset mean, so that a one-pass variance would lose digits.
    const std::vector<double> x = random_values(n * d, rng, 3.0), dy = random_values(n * d, rng);
    std::vector<double> w = random_values(d, rng), b = random_values(d, rng);
    if (!affine) w.assign(static_cast<size_t>(d), 1.0), b.assign(static_cast<size_t>(d), 0.0);
    const Expected e = naive(x, dy, w, b, n, d, eps);
    const Outputs<T> o = run<T>(x, dy, w, b, n, d, affine, eps);
    CHECK(max_abs_diff(o.y, e.y) < tolerance);
    CHECK(max_abs_diff(o.dx, e.dx) < tolerance * std::sqrt(static_cast<double>(d)));
    // Column sums of n terms: their rounding grows with n.
    CHECK(max_abs_diff(o.dweight, e.dweight) < tolerance * static_cast<double>(n));
    CHECK(max_abs_diff(o.dbias, e.dbias) < tolerance * static_cast<double>(n));
  }
}

TEST_CASE("layer_norm kernels give the same bits at one and two threads") {
  std::mt19937 rng(7);
  const int64_t n = 1100, d = 64;  // enough rows and columns to split over the pool
  const std::vector<double> x = random_values(n * d, rng), dy = random_values(n * d, rng);
  const std::vector<double> w = random_values(d, rng), b = random_values(d, rng);
  const int saved = num_threads();
  set_num_threads(1);
  const Outputs<float> one = run<float>(x, dy, w, b, n, d, true, 1e-6);
  set_num_threads(2);
  const Outputs<float> two = run<float>(x, dy, w, b, n, d, true, 1e-6);
  set_num_threads(saved);
  CHECK(one.y == two.y);
  CHECK(one.dx == two.dx);
  CHECK(one.dweight == two.dweight);
  CHECK(one.dbias == two.dbias);
}

TEST_CASE("layer_norm kernels reject rows that are not dense, printing the sizes and strides") {
  std::vector<float> x(12), y(12), mean(3), invstd(3);
  Strided strided_x{x.data(), DType::Float32, {3, 2}, {4, 1}};
  CHECK_THROWS_WITH_FRAGMENT(layer_norm_forward(view(y, {3, 2}), view(mean, {3}), view(invstd, {3}), strided_x,
                                                std::nullopt, std::nullopt, 1e-5),
                             ShapeError,
                             "[cpu::layer_norm] x must be dense (3, 2) rows, got sizes (3, 2) strides (4, 1)");
}

TEST_CASE("layer_norm kernels name the statistic or weight that does not fit x") {
  std::vector<float> x(6), y(6), mean(3), invstd(3), short_mean(2);
  std::vector<double> wide_weight(2);
  CHECK_THROWS_WITH_FRAGMENT(layer_norm_forward(view(y, {3, 2}), view(short_mean, {2}), view(invstd, {3}),
                                                view(x, {3, 2}), std::nullopt, std::nullopt, 1e-5),
                             ShapeError, "[cpu::layer_norm] mean must be a dense vector of 3, got sizes (2,)");
  CHECK_THROWS_WITH_FRAGMENT(layer_norm_forward(view(y, {3, 2}), view(mean, {3}), view(invstd, {3}), view(x, {3, 2}),
                                                view(wide_weight, {2}), std::nullopt, 1e-5),
                             TypeError, "[cpu::layer_norm] weight must be float32");
  std::vector<double> wide_dy(6);
  CHECK_THROWS_WITH_FRAGMENT(layer_norm_backward(view(y, {3, 2}), std::nullopt, std::nullopt, view(wide_dy, {3, 2}),
                                                 view(x, {3, 2}), view(mean, {3}), view(invstd, {3}), std::nullopt),
                             TypeError, "[cpu::layer_norm] dy is float64 but x is float32");
}

}  // namespace loom::cpu
