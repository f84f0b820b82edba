// File: tests/optim/rmsprop_test.cc
// RMSprop against Hinton's rule written out by hand (7 float64 steps; momentum,
// centered, weight decay, maximize), float32, the buffers each option creates,
// per-group hyper-parameters, defaults, a corrupt state and argument errors.
#include "optim/rmsprop.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "optim/sgd.h"
#include "tests/optim/rule_steps.h"
#include "tests/testing.h"

namespace loom {
namespace {

const optim::RmspropOptions kCases[] = {
    {.lr = 0.01},
    {.lr = 0.02, .alpha = 0.9, .eps = 1e-3},
    {.lr = 0.01, .momentum = 0.9},
    {.lr = 0.01, .alpha = 0.95, .centered = true},
    {.lr = 0.005, .alpha = 0.8, .weight_decay = 0.1, .momentum = 0.5, .centered = true},
    {.lr = 0.01, .weight_decay = 0.05, .momentum = 0.3, .maximize = true},
};

std::string name_of(const optim::RmspropOptions& o) {
  return fmt::format("lr {} alpha {} eps {} weight_decay {} momentum {} centered {} maximize {}", o.lr, o.alpha,
                     o.eps, o.weight_decay, o.momentum, o.centered, o.maximize);
}

// The running mean square of the gradients divides each step; centered, the
// square of their running mean comes off it first (Graves 2013).
std::vector<double> rmsprop_by_hand(const optim::RmspropOptions& o, std::vector<double> p, int steps) {
  std::vector<double> v(p.size()), mean(p.size()), b(p.size());
  for (int t = 0; t < steps; ++t) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = testing::rule_grad(p[i], i, t);
      if (o.maximize) g = -g;
      g += o.weight_decay * p[i];
      v[i] = o.alpha * v[i] + (1.0 - o.alpha) * g * g;
      mean[i] = o.alpha * mean[i] + (1.0 - o.alpha) * g;
      const double denom = std::sqrt(o.centered ? v[i] - mean[i] * mean[i] : v[i]) + o.eps;
      b[i] = o.momentum * b[i] + g / denom;
      p[i] -= o.lr * (o.momentum > 0.0 ? b[i] : g / denom);
    }
  }
  return p;
}

Tensor run_rmsprop(const optim::RmspropOptions& o, DType dtype, int steps) {
  Tensor p = tensor(testing::kRuleStart, {3, 2}, {.dtype = dtype, .requires_grad = true});
  optim::RMSprop opt({p}, o);
  for (int t = 0; t < steps; ++t) {
    testing::set_rule_grad(p, t);
    opt.step();
  }
  return p;
}

TEST_CASE("RMSprop follows the rule by hand for 7 float64 steps") {
  for (const optim::RmspropOptions& o : kCases) {
    INFO(name_of(o));
    Tensor p = run_rmsprop(o, DType::Float64, 7);
    CHECK_CLOSE(p, tensor(rmsprop_by_hand(o, testing::kRuleStart, 7), {3, 2}, {.dtype = DType::Float64}), 1e-12, 1e-14);
  }
}

TEST_CASE("RMSprop in float32 stays within float32 rounding of the float64 rule") {
  for (const optim::RmspropOptions& o : kCases) {
    INFO(name_of(o));
    Tensor p = run_rmsprop(o, DType::Float32, 7);
    CHECK_CLOSE(p, tensor(rmsprop_by_hand(o, testing::kRuleStart, 7), {3, 2}, {.dtype = DType::Float32}), 1e-5, 1e-6);
  }
}

TEST_CASE("RMSprop keeps only the buffers its options use, with torch's names") {
  auto buffer_names = [](const optim::RmspropOptions& o) {
    Tensor p = zeros({4}, {.requires_grad = true});
    optim::RMSprop opt({p}, o);
    testing::set_rule_grad(p, 0);
    opt.step();
    std::vector<std::string> names;
    for (const auto& [name, value] : opt.state(0)->buffers) names.push_back(name);
    CHECK(opt.state(0)->step == 1);
    return names;
  };
  CHECK(buffer_names({}) == std::vector<std::string>{"square_avg"});
  CHECK(buffer_names({.momentum = 0.9}) == std::vector<std::string>{"square_avg", "momentum_buffer"});
  CHECK(buffer_names({.centered = true}) == std::vector<std::string>{"square_avg", "grad_avg"});
  CHECK(buffer_names({.momentum = 0.5, .centered = true}) ==
        std::vector<std::string>{"square_avg", "momentum_buffer", "grad_avg"});
}

TEST_CASE("each RMSprop group follows its own hyper-parameters; the defaults are torch's") {
  Tensor a = tensor(testing::kRuleStart, {3, 2}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor b = tensor(testing::kRuleStart, {3, 2}, {.dtype = DType::Float64, .requires_grad = true});
  const optim::RmspropOptions head{.lr = 0.03, .alpha = 0.9, .momentum = 0.5, .centered = true};
  optim::RMSprop opt(std::vector<optim::ParamGroup>{{.params = {a}},
                                                    {.params = {b},
                                                     .lr = head.lr,
                                                     .momentum = head.momentum,
                                                     .alpha = head.alpha,
                                                     .centered = head.centered}});
  for (int t = 0; t < 5; ++t) {
    testing::set_rule_grad(a, t);
    testing::set_rule_grad(b, t);
    opt.step();
  }
  CHECK_CLOSE(a, tensor(rmsprop_by_hand({}, testing::kRuleStart, 5), {3, 2}, {.dtype = DType::Float64}), 1e-12, 1e-14);
  CHECK_CLOSE(b, tensor(rmsprop_by_hand(head, testing::kRuleStart, 5), {3, 2}, {.dtype = DType::Float64}), 1e-12,
              1e-14);
  const optim::ParamGroup& defaults = opt.param_groups()[0];
  CHECK(*defaults.lr == 0.01);
  CHECK(*defaults.alpha == 0.99);
  CHECK(*defaults.eps == 1e-8);
  CHECK(*defaults.weight_decay == 0.0);
  CHECK(*defaults.momentum == 0.0);
  CHECK(!*defaults.centered);
  CHECK(!*defaults.maximize);
  CHECK(opt.name() == "RMSprop");
}

TEST_CASE("RMSprop refuses a negative mean square in a loaded state, and changes nothing") {
  Tensor p = zeros({3}, {.requires_grad = true});
  optim::RMSprop opt({p});
  testing::set_rule_grad(p, 0);
  opt.step();
  StateDict state = opt.state_dict();
  const std::vector<float> before = opt.state(0)->buffers[0].second.to_vector<float>();
  for (auto& [name, value] : state) {
    if (name == "state.0.square_avg") value = tensor({0.5, -0.25, 1.0}, {3});
  }
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(state), ValueError,
                             "state.0.square_avg holds -0.25 at element 1; a mean of squared gradients is >= 0");
  CHECK(opt.state(0)->buffers[0].second.to_vector<float>() == before);
}

TEST_CASE("RMSprop rejects bad arguments with messages that show the values") {
  Tensor p = zeros({2}, {.requires_grad = true});
  CHECK_THROWS_WITH_FRAGMENT(optim::RMSprop({p}, {.lr = -1}), ValueError,
                             "[RMSprop] group 0: lr must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(optim::RMSprop({p}, {.alpha = 1.5}), ValueError,
                             "[RMSprop] group 0: alpha must be in [0, 1], got 1.5");
  CHECK_THROWS_WITH_FRAGMENT(optim::RMSprop({p}, {.eps = -1e-8}), ValueError, "eps must be >= 0, got -1e-08");
  CHECK_THROWS_WITH_FRAGMENT(optim::RMSprop({p}, {.momentum = -0.1}), ValueError,
                             "momentum must be >= 0, got -0.1");
  CHECK_THROWS_WITH_FRAGMENT(optim::RMSprop({p}, {.weight_decay = -0.5}), ValueError,
                             "weight_decay must be >= 0, got -0.5");
  CHECK_THROWS_WITH_FRAGMENT(
      optim::RMSprop(std::vector<optim::ParamGroup>{{.params = {p}, .betas = std::pair{0.9, 0.99}}}), ValueError,
      "group 0 sets betas, which RMSprop does not use");
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD(std::vector<optim::ParamGroup>{{.params = {p}, .alpha = 0.9}}), ValueError,
                             "group 0 sets alpha, which SGD does not use");
}

}  // namespace
}  // namespace loom
