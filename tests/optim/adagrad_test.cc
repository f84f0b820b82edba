// File: tests/optim/adagrad_test.cc
// Adagrad against Duchi et al.'s rule written out by hand (7 float64 steps;
// lr_decay, initial_accumulator_value, weight decay, maximize), float32, the
// decay counting each parameter's own steps, defaults, a corrupt state and
// argument errors.
#include "optim/adagrad.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/optim/rule_steps.h"
#include "tests/testing.h"

namespace loom {
namespace {

const optim::AdagradOptions kCases[] = {
    {.lr = 0.1},
    {.lr = 0.1, .lr_decay = 0.3},
    {.lr = 0.05, .initial_accumulator_value = 0.5, .eps = 1e-3},
    {.lr = 0.1, .lr_decay = 0.05, .weight_decay = 0.1, .initial_accumulator_value = 0.1, .maximize = true},
};

std::string name_of(const optim::AdagradOptions& o) {
  return fmt::format("lr {} lr_decay {} weight_decay {} initial {} eps {} maximize {}", o.lr, o.lr_decay,
                     o.weight_decay, o.initial_accumulator_value, o.eps, o.maximize);
}

// Each coordinate's step is divided by the root of its squared gradients so far.
std::vector<double> adagrad_by_hand(const optim::AdagradOptions& o, std::vector<double> p, int steps) {
  std::vector<double> sum(p.size(), o.initial_accumulator_value);
  for (int t = 1; t <= steps; ++t) {
    const double lr = o.lr / (1.0 + (t - 1) * o.lr_decay);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = testing::rule_grad(p[i], i, t - 1);
      if (o.maximize) g = -g;
      g += o.weight_decay * p[i];
      sum[i] += g * g;
      p[i] -= lr * g / (std::sqrt(sum[i]) + o.eps);
    }
  }
  return p;
}

Tensor run_adagrad(const optim::AdagradOptions& o, DType dtype, int steps) {
  Tensor p = tensor(testing::kRuleStart, {3, 2}, {.dtype = dtype, .requires_grad = true});
  optim::Adagrad opt({p}, o);
  for (int t = 0; t < steps; ++t) {
    testing::set_rule_grad(p, t);
    opt.step();
  }
  return p;
}

TEST_CASE("Adagrad follows the rule by hand for 7 float64 steps") {
  for (const optim::AdagradOptions& o : kCases) {
    INFO(name_of(o));
    Tensor p = run_adagrad(o, DType::Float64, 7);
    CHECK_CLOSE(p, tensor(adagrad_by_hand(o, testing::kRuleStart, 7), {3, 2}, {.dtype = DType::Float64}), 1e-12, 1e-14);
  }
}

TEST_CASE("Adagrad in float32 stays within float32 rounding of the float64 rule") {
  for (const optim::AdagradOptions& o : kCases) {
    INFO(name_of(o));
    Tensor p = run_adagrad(o, DType::Float32, 7);
    CHECK_CLOSE(p, tensor(adagrad_by_hand(o, testing::kRuleStart, 7), {3, 2}, {.dtype = DType::Float32}), 1e-5, 1e-6);
  }
}

TEST_CASE("Adagrad's lr_decay counts each parameter's own steps; its sum starts at the initial value") {
  // b first gets a gradient at step 4: its learning rate is then undecayed and its
  // sum initial + g^2, while a's decays to lr / (1 + 3 lr_decay).
  Tensor a = tensor({1.0}, {1}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor b = tensor({1.0, -2.0}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  optim::Adagrad opt({a, b}, {.lr = 0.1, .lr_decay = 0.5, .initial_accumulator_value = 0.25});
  double expected_a = 1.0, sum_a = 0.25;
  for (int t = 0; t < 4; ++t) {
    a.set_grad(tensor({0.5}, {1}, {.dtype = DType::Float64}));
    if (t == 3) b.set_grad(tensor({0.3, -4.0}, {2}, {.dtype = DType::Float64}));
    opt.step();
    sum_a += 0.25;
    expected_a -= 0.1 / (1.0 + t * 0.5) * 0.5 / (std::sqrt(sum_a) + 1e-10);
  }
  CHECK(opt.state(0)->step == 4);
  CHECK(opt.state(1)->step == 1);
  CHECK(a.item() == doctest::Approx(expected_a).epsilon(1e-14));
  CHECK_CLOSE(b,
              tensor({1.0 - 0.1 * 0.3 / (std::sqrt(0.25 + 0.09) + 1e-10),
                      -2.0 + 0.1 * 4.0 / (std::sqrt(0.25 + 16.0) + 1e-10)},
                     {2}, {.dtype = DType::Float64}),
              1e-14, 0);
  CHECK(opt.state(1)->buffers[0].first == "sum");
  CHECK(opt.state(1)->buffers[0].second.to_vector<double>() == std::vector<double>{0.25 + 0.09, 0.25 + 16.0});
}

TEST_CASE("Adagrad's defaults are torch's") {
  Tensor p = zeros({2}, {.requires_grad = true});
  optim::Adagrad opt({p});
  const optim::ParamGroup& g = opt.param_groups()[0];
  CHECK(*g.lr == 0.01);
  CHECK(*g.lr_decay == 0.0);
  CHECK(*g.weight_decay == 0.0);
  CHECK(*g.initial_accumulator_value == 0.0);
  CHECK(*g.eps == 1e-10);
  CHECK(!*g.maximize);
  CHECK(opt.name() == "Adagrad");
}

TEST_CASE("Adagrad refuses a negative sum in a loaded state, and changes nothing") {
  Tensor p = zeros({3}, {.requires_grad = true});
  optim::Adagrad opt({p});
  testing::set_rule_grad(p, 0);
  opt.step();
  StateDict state = opt.state_dict();
  const std::vector<float> before = opt.state(0)->buffers[0].second.to_vector<float>();
  for (auto& [name, value] : state) {
    if (name == "state.0.sum") value = tensor({0.5, -0.25, 1.0}, {3});
  }
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(state), ValueError,
                             "state.0.sum holds -0.25 at element 1; a sum of squared gradients is >= 0");
  CHECK(opt.state(0)->buffers[0].second.to_vector<float>() == before);
}

TEST_CASE("Adagrad rejects bad arguments with messages that show the values") {
  Tensor p = zeros({2}, {.requires_grad = true});
  CHECK_THROWS_WITH_FRAGMENT(optim::Adagrad({p}, {.lr = -1}), ValueError,
                             "[Adagrad] group 0: lr must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(optim::Adagrad({p}, {.lr_decay = -0.1}), ValueError,
                             "lr_decay must be >= 0, got -0.1");
  CHECK_THROWS_WITH_FRAGMENT(optim::Adagrad({p}, {.weight_decay = -0.5}), ValueError,
                             "weight_decay must be >= 0, got -0.5");
  CHECK_THROWS_WITH_FRAGMENT(optim::Adagrad({p}, {.initial_accumulator_value = -1}), ValueError,
                             "initial_accumulator_value must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(optim::Adagrad({p}, {.eps = -1e-10}), ValueError, "eps must be >= 0, got -1e-10");
  CHECK_THROWS_WITH_FRAGMENT(optim::Adagrad(std::vector<optim::ParamGroup>{{.params = {p}, .momentum = 0.9}}),
                             ValueError, "group 0 sets momentum, which Adagrad does not use");
}

}  // namespace
}  // namespace loom
