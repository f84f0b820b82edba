// File: tests/testing.cc
// Shared test helpers: closeness checks that print where tensors differ.
#include "tests/testing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace loom::testing {

Device test_gpu() {
  static const Device device = [] {
    const char* text = std::getenv("LOOM_TEST_DEVICE");
    return text == nullptr ? Device::cuda() : Device::parse(fmt::format("cuda:{}", text));
  }();
  return device;
}

bool test_gpu_available() { return test_gpu().index < cuda_device_count(); }

std::vector<double> values(const Tensor& tensor) { return tensor.to_vector<double>(); }

Moments moments(const Tensor& tensor) {
  const std::vector<double> v = values(tensor);
  const double n = static_cast<double>(v.size());
  if (v.empty()) return {NAN, NAN, NAN, NAN};
  Moments m{v[0], v[0], 0, 0};
  for (double x : v) {
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
    m.mean += x / n;
  }
  for (double x : v) m.var += (x - m.mean) * (x - m.mean) / n;
  return m;
}

Tensor exact_randn(const Shape& sizes, DType dtype, Generator& gen) {
  return randn(sizes, {}, &gen).to(test_gpu()).to(dtype).to(DType::Float32).cpu();
}

namespace {
double scale_of(const std::vector<double>& v) {
  double scale = 1;
  for (double x : v) scale = std::max(scale, std::fabs(x));
  return scale;
}
}  // namespace

double normalized_error(const Tensor& actual, const Tensor& expected) {
  const std::vector<double> a = values(actual), b = values(expected);
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(a[i] - b[i]);
    if (std::isnan(e)) return INFINITY;
    worst = std::max(worst, e);
  }
  return worst / scale_of(b);
}

bool decision_flips(const Tensor& actual, const Tensor& expected, double tol) {
  const std::vector<double> a = values(actual), b = values(expected);
  REQUIRE(a.size() == b.size());
  const double scale = scale_of(b);
  int64_t off = 0;
  for (size_t i = 0; i < a.size(); ++i) off += !(std::fabs(a[i] - b[i]) <= tol * scale);
  const int64_t slices = expected.dim() > 0 ? std::max<int64_t>(expected.size(0), 1) : 1;
  const double allowed = std::max(0.02, 2.0 / static_cast<double>(slices));
  return static_cast<double>(off) <= allowed * static_cast<double>(std::max<size_t>(a.size(), 1));
}

void check_scaled(const Tensor& actual, const Tensor& expected, double tol) {
  double scale = 0;  // the largest magnitude itself, no floor at 1 (unlike scale_of)
  for (double v : values(expected)) scale = std::max(scale, std::fabs(v));
  CHECK_CLOSE(actual.to(DType::Float64).cpu(), expected.to(DType::Float64).cpu(), 0, tol * scale);
}

std::string close_report(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (actual.sizes() != expected.sizes()) {
    return fmt::format("shapes differ: actual {} vs expected {}", shape_str(actual.sizes()),
                       shape_str(expected.sizes()));
  }
  std::vector<double> a = values(actual), e = values(expected);
  double max_abs = 0;
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < a.size(); ++i) {
    double diff = std::fabs(a[i] - e[i]);
    bool ok = diff <= atol + rtol * std::fabs(e[i]) && !std::isnan(a[i]) && !std::isnan(e[i]);
    if (std::isnan(diff) || diff > max_abs) max_abs = diff;
    if (!ok && ++bad <= 5) first += fmt::format("  [{}] actual {:.9g} expected {:.9g}\n", i, a[i], e[i]);
  }
  if (bad == 0) return "";
  return fmt::format("{} of {} elements differ (shape {}, rtol {}, atol {}, max abs error {:.3g}):\n{}",
                     bad, a.size(), shape_str(actual.sizes()), rtol, atol, max_abs, first);
}

ScopedEnv::ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
  if (const char* before = std::getenv(name_.c_str())) before_ = before;
  setenv(name_.c_str(), value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
  if (before_) {
    setenv(name_.c_str(), before_->c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

}  // namespace loom::testing
