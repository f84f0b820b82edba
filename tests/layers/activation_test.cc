// File: tests/layers/activation_test.cc
// The activation modules are their functional ops (any layout), with no
// parameters and PyTorch's print.
// N batch, C channels, H, W.
#include "layers/activation.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/functional.h"
#include "layers/upsample.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct Case {
  std::shared_ptr<nn::Module> layer;
  std::function<Tensor(const Tensor&)> op;
  std::string printed;
};

TEST_CASE("every activation row has a named module class and a functional name") {
  // The table above names each row's class; this guards against a new row without one.
  const std::vector<std::string> named = {"ReLU", "Sigmoid", "Tanh", "GELU", "SiLU", "ELU", "LeakyReLU",
                                          "Softplus", "Mish", "Hardswish", "Hardtanh", "ReLU6"};
  for (ActivationKind kind : kernel::kActivationKinds) {
    CAPTURE(kernel::activation_info(kind).name);
    CHECK(std::find(named.begin(), named.end(), kernel::activation_info(kind).module_name) != named.end());
  }
}

TEST_CASE("each activation module equals its op") {
  const std::vector<Case> cases = {
      {std::make_shared<nn::ReLU>(), [](const Tensor& x) { return relu(x); }, "ReLU()"},
      {std::make_shared<nn::Sigmoid>(), [](const Tensor& x) { return sigmoid(x); }, "Sigmoid()"},
      {std::make_shared<nn::Tanh>(), [](const Tensor& x) { return loom::tanh(x); }, "Tanh()"},
      {std::make_shared<nn::GELU>(), [](const Tensor& x) { return gelu(x); },
       "GELU(approximate='none')"},
      {std::make_shared<nn::SiLU>(), [](const Tensor& x) { return silu(x); }, "SiLU()"},
      {std::make_shared<nn::GELU>("tanh"), [](const Tensor& x) { return gelu(x, "tanh"); },
       "GELU(approximate='tanh')"},
      {std::make_shared<nn::ELU>(0.5), [](const Tensor& x) { return elu(x, 0.5); }, "ELU(alpha=0.5)"},
      {std::make_shared<nn::LeakyReLU>(), [](const Tensor& x) { return leaky_relu(x); },
       "LeakyReLU(negative_slope=0.01)"},
      {std::make_shared<nn::Softplus>(), [](const Tensor& x) { return softplus(x); },
       "Softplus(beta=1.0, threshold=20.0)"},
      {std::make_shared<nn::Activation>(ActivationKind::Silu), [](const Tensor& x) { return silu(x); },
       "SiLU()"},
      {std::make_shared<nn::Activation>(ActivationKind::Mish),
       [](const Tensor& x) { return activation(x, ActivationKind::Mish); }, "Mish()"},
      {std::make_shared<nn::Activation>(ActivationKind::Hardswish),
       [](const Tensor& x) { return activation(x, ActivationKind::Hardswish); }, "Hardswish()"},
      {std::make_shared<nn::Mish>(), [](const Tensor& x) { return mish(x); }, "Mish()"},
      {std::make_shared<nn::Hardswish>(), [](const Tensor& x) { return hardswish(x); }, "Hardswish()"},
      {std::make_shared<nn::ReLU6>(), [](const Tensor& x) { return relu6(x); }, "ReLU6()"},
      {std::make_shared<nn::Hardtanh>(), [](const Tensor& x) { return hardtanh(x); },
       "Hardtanh(min_val=-1.0, max_val=1.0)"},
      {std::make_shared<nn::Hardtanh>(-0.5, 2), [](const Tensor& x) { return hardtanh(x, -0.5, 2); },
       "Hardtanh(min_val=-0.5, max_val=2.0)"},
  };
  Generator gen(1);
  const Tensor x = randn({2, 3, 4, 5}, {}, &gen);
  const Tensor x_nhwc = x.contiguous(MemoryFormat::ChannelsLast);
  for (const Case& c : cases) {
    CAPTURE(c.printed);
    CHECK_CLOSE((*c.layer)(x), c.op(x), 0, 0);
    CHECK_CLOSE((*c.layer)(x_nhwc), c.op(x), 0, 0);
    CHECK(c.layer->parameters().empty());
    CHECK(c.layer->repr() == c.printed);
  }
}

TEST_CASE("nn::functional has every activation row's functional name") {
  namespace F = nn::functional;
  const Tensor x = tensor({-7, -1, 0.5, 7}, {4});
  CHECK(F::relu6(x).to_vector<double>() == std::vector<double>{0, 0, 0.5, 6});
  CHECK(F::hardtanh(x, -2, 2).to_vector<double>() == std::vector<double>{-2, -1, 0.5, 2});
  CHECK_CLOSE(F::elu(x), elu(x), 0, 0);
  CHECK_CLOSE(F::leaky_relu(x, 0.2), leaky_relu(x, 0.2), 0, 0);
  CHECK_CLOSE(F::softplus(x), softplus(x), 0, 0);
  CHECK_CLOSE(F::mish(x), mish(x), 0, 0);
  CHECK_CLOSE(F::hardswish(x), hardswish(x), 0, 0);
}

TEST_CASE("activation modules on hand-checked values") {
  const Tensor x = tensor({-1, 0, 2}, {3});
  CHECK(nn::ReLU()(x).to_vector<double>() == std::vector<double>{0, 0, 2});
  CHECK(nn::Sigmoid()(x).at({1}) == 0.5);
  CHECK(nn::Tanh()(x).at({2}) == doctest::Approx(std::tanh(2.0)));
  CHECK(nn::SiLU()(x).at({2}) == doctest::Approx(2.0 / (1.0 + std::exp(-2.0))));
  CHECK(nn::GELU()(x).at({0}) == doctest::Approx(-0.5 * std::erfc(1.0 / std::sqrt(2.0))));
  CHECK(nn::LeakyReLU(0.1)(x).to_vector<double>() == std::vector<double>{-0.1f, 0, 2});
}

TEST_CASE("PReLU: a learnt slope per channel or shared, named weight, trained by its gradient") {
  nn::PReLU shared, per_channel(3, 0.1);
  CHECK(shared.repr() == "PReLU(num_parameters=1)");
  CHECK(per_channel.repr() == "PReLU(num_parameters=3)");
  CHECK(shared.weight().to_vector<double>() == std::vector<double>{0.25});
  CHECK(per_channel.weight().to_vector<double>() == std::vector<double>(3, 0.1f));
  const auto params = per_channel.named_parameters();
  REQUIRE(params.size() == 1);
  CHECK(params[0].first == "weight");
  CHECK(params[0].second.requires_grad());
  Generator gen(94);
  const Tensor x = randn({2, 3, 4, 4}, {}, &gen);
  CHECK_CLOSE(per_channel(x), prelu(x, per_channel.weight()), 0, 0);
  sum(per_channel(x)).backward();
  CHECK_CLOSE(per_channel.weight().grad(), sum(minimum(x, zeros_like(x)), {0, 2, 3}), 1e-6, 1e-6);
  CHECK_THROWS_WITH_FRAGMENT(nn::PReLU(0), ValueError, "[PReLU] num_parameters must be >= 1, got 0");
}

TEST_CASE("PixelShuffle and PixelUnshuffle equal their ops and print their factors") {
  nn::PixelShuffle up(3);
  nn::PixelUnshuffle down(3);
  CHECK(up.repr() == "PixelShuffle(upscale_factor=3)");
  CHECK(down.repr() == "PixelUnshuffle(downscale_factor=3)");
  CHECK(up.parameters().empty());
  Generator gen(95);
  const Tensor x = randn({2, 18, 2, 3}, {}, &gen);
  CHECK_CLOSE(up(x), pixel_shuffle(x, 3), 0, 0);
  CHECK(up(x).sizes() == Shape{2, 2, 6, 9});
  CHECK_CLOSE(down(up(x)), x, 0, 0);
  CHECK_THROWS_WITH_FRAGMENT(nn::PixelShuffle(0), ValueError, "[PixelShuffle] upscale_factor must be >= 1, got 0");
}

TEST_CASE("activation modules reject a parameter their row does not take, and unknown GELU forms") {
  CHECK_THROWS_WITH_FRAGMENT(nn::Activation(ActivationKind::Tanh, {2.0}), ValueError,
                             "[Tanh] takes no parameter, got 2");
  CHECK_THROWS_WITH_FRAGMENT(nn::Hardtanh(2, 1), ValueError, "[Hardtanh] min_val (2) must be below max_val (1)");
  CHECK_THROWS_WITH_FRAGMENT(nn::GELU("erf"), ValueError, "approximate must be 'none' or 'tanh', got 'erf'");
}

}  // namespace
}  // namespace loom
