// File: tests/layers/init_test.cc
// nn::init: fans and gains, bounds and moments of every initialiser (the
// truncated normal against its closed-form moments), PyTorch's Conv2d / Linear
// defaults, and where the random numbers come from.
// K out channels, C in channels, R, S filter.
#include "layers/init.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/nn.h"
#include "tests/testing.h"

namespace loom {
namespace {

using testing::Moments;
using testing::moments;

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

TEST_CASE("fan_in and fan_out are size(1) and size(0) times the receptive field") {
  CHECK(nn::init::fan_in(empty({8, 3, 5, 5})) == 75);
  CHECK(nn::init::fan_out(empty({8, 3, 5, 5})) == 200);
  CHECK(nn::init::fan_in(empty({4, 7})) == 7);
  CHECK(nn::init::fan_out(empty({4, 7})) == 4);
  CHECK(nn::init::fan_in(empty({0, 7})) == 7);
  CHECK_THROWS_WITH_FRAGMENT(nn::init::fan_in(empty({7})), ShapeError,
                             "[init.fan_in] needs a weight with at least 2 dims");
  CHECK_THROWS_WITH_FRAGMENT(nn::init::fan_out(empty({7})), ShapeError, "[init.fan_out]");
}

TEST_CASE("calculate_gain is torch.nn.init.calculate_gain's") {
  using nn::init::Nonlinearity;
  CHECK(nn::init::calculate_gain(Nonlinearity::Linear) == 1.0);
  CHECK(nn::init::calculate_gain(Nonlinearity::Conv) == 1.0);
  CHECK(nn::init::calculate_gain(Nonlinearity::Sigmoid) == 1.0);
  CHECK(nn::init::calculate_gain(Nonlinearity::Tanh) == doctest::Approx(5.0 / 3));
  CHECK(nn::init::calculate_gain(Nonlinearity::ReLU) == doctest::Approx(std::sqrt(2.0)));
  CHECK(nn::init::calculate_gain(Nonlinearity::SELU) == 0.75);
  CHECK(nn::init::calculate_gain(Nonlinearity::LeakyReLU) == doctest::Approx(std::sqrt(2.0 / (1 + 1e-4))));
  CHECK(nn::init::calculate_gain(Nonlinearity::LeakyReLU, 0.2) == doctest::Approx(std::sqrt(2.0 / 1.04)));
  CHECK(nn::init::calculate_gain(Nonlinearity::ReLU, 0.2) == doctest::Approx(std::sqrt(2.0)));
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

TEST_CASE("kaiming_uniform_ bound: gain(a) * sqrt(3 / fan), fan_in or fan_out") {
  using nn::init::FanMode;
  using nn::init::Nonlinearity;
  Generator gen(2);
  Tensor w = empty({200, 100});  // fan_in 100, fan_out 200
  nn::init::kaiming_uniform_(w, std::sqrt(5.0), FanMode::FanIn, Nonlinearity::LeakyReLU, &gen);
  check_symmetric_uniform(w, 0.1);  // sqrt(2 / 6) * sqrt(3 / 100) = 1 / sqrt(100)
  nn::init::kaiming_uniform_(w, 0.0, FanMode::FanIn, Nonlinearity::LeakyReLU, &gen);
  check_symmetric_uniform(w, std::sqrt(6.0 / 100));
  nn::init::kaiming_uniform_(w, 0.0, FanMode::FanOut, Nonlinearity::Tanh, &gen);
  check_symmetric_uniform(w, 5.0 / 3 * std::sqrt(3.0 / 200));
  // A weight without elements is left as it is, as PyTorch's initialisers do.
  Tensor flat = empty({3, 0});
  CHECK(nn::init::kaiming_uniform_(flat, 0.0).sizes() == Shape{3, 0});
  CHECK(nn::init::kaiming_normal_(flat).sizes() == Shape{3, 0});
  CHECK(nn::init::xavier_uniform_(flat).sizes() == Shape{3, 0});
  Tensor no_inputs = empty({4, 0}), bias = full({4}, 7.0);  // PyTorch's layers' bias bound is 0 then
  nn::init::default_weight_and_bias_(no_inputs, bias, &gen);
  CHECK(bias.to_vector<double>() == std::vector<double>(4, 0.0));
}

TEST_CASE("normal_, kaiming_normal_ and xavier_normal_ draw N(0, std^2) with their std") {
  using nn::init::FanMode;
  using nn::init::Nonlinearity;
  Generator gen(5);
  Tensor t = empty({40000}, {.dtype = DType::Float64});
  nn::init::normal_(t, 3.0, 0.5, &gen);
  Moments m = moments(t);
  CHECK(m.mean == doctest::Approx(3.0).epsilon(0.01));
  CHECK(m.var == doctest::Approx(0.25).epsilon(0.03));
  Tensor w = empty({64, 32, 3, 3}).contiguous(MemoryFormat::ChannelsLast);  // fan_in 288, fan_out 576
  nn::init::kaiming_normal_(w, 0.0, FanMode::FanOut, Nonlinearity::ReLU, &gen);  // torchvision's ResNet convs
  m = moments(w);
  CHECK(std::abs(m.mean) < 5 * std::sqrt(2.0 / 576 / static_cast<double>(w.numel())));
  CHECK(m.var == doctest::Approx(2.0 / 576).epsilon(0.05));
  CHECK(w.is_contiguous(MemoryFormat::ChannelsLast));
  nn::init::xavier_normal_(w, 2.0, &gen);
  CHECK(moments(w).var == doctest::Approx(4.0 * 2 / (288 + 576)).epsilon(0.05));
  nn::init::xavier_uniform_(w, 1.0, &gen);
  check_symmetric_uniform(w, std::sqrt(6.0 / (288 + 576)));
  Tensor half = empty({4000}, {.dtype = DType::BFloat16});
  nn::init::normal_(half, 0.0, 2.0, &gen);
  CHECK(moments(half).var == doctest::Approx(4.0).epsilon(0.1));
  Tensor ints = zeros({4}, {.dtype = DType::Int64});
  CHECK_THROWS_WITH_FRAGMENT(nn::init::normal_(ints), TypeError, "[init.normal_] fills floating tensors, not int64");
  CHECK_THROWS_WITH_FRAGMENT(nn::init::normal_(t, 0.0, -1.0), ValueError, "needs std >= 0, got -1");
  Tensor same_a = empty({50}), same_b = empty({50});
  Generator g1(8), g2(8);
  nn::init::normal_(same_a, 0, 1, &g1);
  nn::init::normal_(same_b, 0, 1, &g2);
  CHECK_CLOSE(same_a, same_b, 0, 0);
}

TEST_CASE("trunc_normal_ stays within [a, b] with the truncated normal's moments") {
  Generator gen(6);
  Tensor t = empty({40000}, {.dtype = DType::Float64});
  nn::init::trunc_normal_(t, 0.0, 1.0, -2.0, 2.0, &gen);  // variance 1 - 2 * 2 * phi(2) / (Phi(2) - Phi(-2))
  Moments m = moments(t);
  CHECK(m.min >= -2.0);
  CHECK(m.max <= 2.0);
  CHECK(std::abs(m.mean) < 0.02);
  CHECK(m.var == doctest::Approx(0.773741).epsilon(0.03));
  nn::init::trunc_normal_(t, 0.0, 1.0, 0.0, INFINITY, &gen);  // the half-normal: mean sqrt(2 / pi)
  m = moments(t);
  CHECK(m.min >= 0.0);
  CHECK(m.mean == doctest::Approx(std::sqrt(2 / std::numbers::pi)).epsilon(0.02));
  CHECK(m.var == doctest::Approx(1 - 2 / std::numbers::pi).epsilon(0.04));
  nn::init::trunc_normal_(t, 1.0, 0.02, -INFINITY, INFINITY, &gen);  // untruncated: N(1, 0.02^2)
  m = moments(t);
  CHECK(m.mean == doctest::Approx(1.0).epsilon(0.001));
  CHECK(m.var == doctest::Approx(0.0004).epsilon(0.03));
  const std::vector<double> v = t.to_vector<double>();
  const double below = static_cast<double>(std::count_if(v.begin(), v.end(), [](double x) { return x < 1.02; }));
  CHECK(below / static_cast<double>(v.size()) == doctest::Approx(0.841345).epsilon(0.01));  // Phi(1)
  Tensor p = empty({8, 8}).requires_grad_(true);
  nn::init::trunc_normal_(p, 0.0, 0.02);  // ViT's position embedding: the bounds +-2 are absolute, far out
  CHECK(p.requires_grad());
  CHECK(moments(p).max < 0.1);
  CHECK_THROWS_WITH_FRAGMENT(nn::init::trunc_normal_(p, 0.0, 1.0, 1.0, -1.0), ValueError,
                             "needs std > 0 and a < b, got std 1, a 1, b -1");
}

TEST_CASE("constant_, zeros_ and ones_ fill a parameter") {
  Tensor p = empty({2, 2}).requires_grad_(true);
  nn::init::constant_(p, 0.5);
  CHECK(p.to_vector<double>() == std::vector<double>(4, 0.5));
  nn::init::ones_(p);
  CHECK(p.to_vector<double>() == std::vector<double>(4, 1.0));
  nn::init::zeros_(p);
  CHECK(p.to_vector<double>() == std::vector<double>(4, 0.0));
}

TEST_CASE("a torchvision-style init loop fills the layers' own parameters through weight() and bias()") {
  manual_seed(12);
  nn::Sequential net;
  net.push_back(nn::Conv2d(16, 32, 3, {.padding = 1, .bias = false}));
  net.push_back(nn::BatchNorm2d(32));
  net.push_back(nn::ReLU());
  for (auto& [name, m] : net.named_modules()) {
    if (auto conv = std::dynamic_pointer_cast<nn::Conv2d>(m)) {
      nn::init::kaiming_normal_(conv->weight(), 0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU);
    } else if (auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(m)) {
      nn::init::zeros_(bn->weight());
      nn::init::constant_(bn->bias(), 0.25);
    }
  }
  const nn::NamedTensors params = net.named_parameters();
  REQUIRE(params.size() == 3);
  CHECK(params[0].second.requires_grad());
  CHECK(moments(params[0].second).var == doctest::Approx(2.0 / (32 * 9)).epsilon(0.1));  // fan_out 288
  CHECK(params[1].second.to_vector<double>() == std::vector<double>(32, 0.0));
  CHECK(params[2].second.to_vector<double>() == std::vector<double>(32, 0.25));
}

TEST_CASE("Conv2d and Linear start as PyTorch's: U(+-1/sqrt(fan_in)) for weight and bias") {
  Generator gen(3);
  nn::Conv2d conv(64, 128, 3, {.generator = &gen});  // fan_in 576
  check_symmetric_uniform(conv.weight(), 1.0 / 24);
  const Moments conv_bias = moments(conv.bias());
  CHECK(conv_bias.max <= 1.0 / 24);
  CHECK(conv_bias.min >= -1.0 / 24);
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
