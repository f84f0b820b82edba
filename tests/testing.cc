#include "tests/testing.h"

#include <fmt/format.h>

#include <cmath>

namespace loom::testing {

std::vector<double> values(const Tensor& tensor) { return tensor.to_vector<double>(); }

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

}  // namespace loom::testing
