// File: tests/layers/init_test.cc
// nn::init: fan_in, bounds and moments of uniform_ / kaiming_uniform_, PyTorch's
// Conv2d / Linear defaults, and where the random numbers come from.
// K out channels, C in channels, R, S filter.
#include "layers/init.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/conv.h"
#include "layers/linear.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct Moments {
  double min, max, mean, var;
};

Moments moments(const Tensor& t) {
  const std::vector<double> v = t.to_vector<double>();
  Moments m{v[0], v[0], 0, 0};
  for (double x : v) {
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
    m.mean += x / static_cast<double>(v.size());
  }
  for (double x : v) m.var += (x - m.mean) * (x - m.mean) / static_cast<double>(v.size());
  return m;
}

// Within the bounds, touching both ends, with U(-b, b)'s mean 0 and variance b^2 / 3.
void check_symmetric_uniform(const Tensor& t, double bound) {
  const Moments m = moments(t);
  const double n = static_cast<double>(t.numel());
  CHECK(m.min >= -bound);
  CHECK(m.max <= bound);
  CHECK(m.min < -0.98 * bound);
  CHECK(m.max > 0.98 * bound);
  CHECK(std::abs(m.mean) < 5 * bound / std::sqrt(3 * n));  // 5 standard errors
  CHECK(m.var == doctest::Approx(bound * bound / 3).epsilon(0.05));
}

TEST_CASE("fan_in is size(1) times the receptive field") {
  CHECK(nn::init::fan_in(empty({8, 3, 5, 5})) == 75);
  CHECK(nn::init::fan_in(empty({4, 7})) == 7);
  CHECK(nn::init::fan_in(empty({0, 7})) == 7);
  CHECK_THROWS_WITH_FRAGMENT(nn::init::fan_in(empty({7})), ShapeError,
                             "[init.fan_in] needs a weight with at least 2 dims");
}

TEST_CASE("uniform_ fills in place within [low, high) with the right moments") {
  Generator gen(1);
  Tensor t = empty({20000}, {.dtype = DType::Float64});
  nn::init::uniform_(t, 2.0, 4.0, &gen);
  const Moments m = moments(t);
  CHECK(m.min >= 2.0);
  CHECK(m.max < 4.0);
  CHECK(m.mean == doctest::Approx(3.0).epsilon(0.01));
  CHECK(m.var == doctest::Approx(4.0 / 12).epsilon(0.05));
  CHECK_THROWS_WITH_FRAGMENT(nn::init::uniform_(t, 1.0, 0.5, &gen), ValueError,
                             "needs low <= high, got low 1 high 0.5");
}

TEST_CASE("uniform_ works on a parameter and one seed gives one draw") {
  Tensor a = empty({100}).requires_grad_(true), b = empty({100}), c = empty({100});
  Generator g1(42), g2(42), g3(43);
  nn::init::uniform_(a, -1, 1, &g1);
  nn::init::uniform_(b, -1, 1, &g2);
  nn::init::uniform_(c, -1, 1, &g3);
  CHECK(a.requires_grad());
  CHECK_CLOSE(a, b, 0, 0);
  CHECK(a.to_vector<double>() != c.to_vector<double>());
}

TEST_CASE("kaiming_uniform_ bound: gain(a) * sqrt(3 / fan_in)") {
  Generator gen(2);
  Tensor w = empty({200, 100});  // fan_in 100
  nn::init::kaiming_uniform_(w, std::sqrt(5.0), &gen);
  check_symmetric_uniform(w, 0.1);  // sqrt(2 / 6) * sqrt(3 / 100) = 1 / sqrt(100)
  nn::init::kaiming_uniform_(w, 0.0, &gen);
  check_symmetric_uniform(w, std::sqrt(6.0 / 100));
  Tensor flat = empty({3, 0});
  CHECK_THROWS_WITH_FRAGMENT(nn::init::kaiming_uniform_(flat, 0.0, &gen), ValueError,
                             "weight of shape (3, 0) has fan_in 0");
}

TEST_CASE("constant_ fills a parameter") {
  Tensor p = empty({2, 2}).requires_grad_(true);
  nn::init::constant_(p, 0.5);
  CHECK(p.to_vector<double>() == std::vector<double>(4, 0.5));
}

TEST_CASE("Conv2d and Linear start as PyTorch's: U(+-1/sqrt(fan_in)) for weight and bias") {
  Generator gen(3);
  nn::Conv2d conv(64, 128, 3, {.generator = &gen});  // fan_in 576
  check_symmetric_uniform(conv.weight(), 1.0 / 24);
  const std::vector<double> bias = conv.bias().to_vector<double>();
  CHECK(*std::max_element(bias.begin(), bias.end()) <= 1.0 / 24);
  CHECK(*std::min_element(bias.begin(), bias.end()) >= -1.0 / 24);
  nn::Linear fc(400, 120, {.generator = &gen});  // fan_in 400
  check_symmetric_uniform(fc.weight(), 0.05);
  const Moments b = moments(fc.bias());
  CHECK((b.min >= -0.05 && b.max <= 0.05 && b.max - b.min > 0.05));
  nn::Conv2d grouped(8, 8, 3, {.groups = 4, .generator = &gen});  // fan_in 2 * 9
  check_symmetric_uniform(grouped.weight(), 1.0 / std::sqrt(18.0));
}

TEST_CASE("layers draw from the default generator unless given one") {
  manual_seed(7);
  nn::Linear a(30, 20);
  manual_seed(7);
  nn::Linear b(30, 20);
  CHECK_CLOSE(a.weight(), b.weight(), 0, 0);
  CHECK_CLOSE(a.bias(), b.bias(), 0, 0);
  nn::Linear c(30, 20);
  CHECK(a.weight().to_vector<double>() != c.weight().to_vector<double>());

  const uint64_t offset = default_generator().offset();
  Generator g1(9), g2(9);
  nn::Conv2d d(3, 4, 3, {.generator = &g1}), e(3, 4, 3, {.generator = &g2});
  CHECK(default_generator().offset() == offset);
  CHECK_CLOSE(d.weight(), e.weight(), 0, 0);
  d.reset_parameters(&g1);
  CHECK(d.weight().to_vector<double>() != e.weight().to_vector<double>());
}

}  // namespace
}  // namespace loom
