// File: tests/optim/adam_test.cc
// Adam and AdamW against the textbook algorithms written out by hand (7
// float64 steps; amsgrad, L2 vs decoupled weight decay, maximize), per-parameter
// bias correction, float32, defaults, and argument errors.
#include "optim/adam.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/error.h"
#include "tests/optim/rule_steps.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct AdamCase {
  const char* name;
  bool decoupled;  // AdamW
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize;
};

const AdamCase kCases[] = {
    {"adam", false, 0.01, 0.9, 0.999, 1e-8, 0.0, false, false},
    {"adam_betas_eps", false, 0.05, 0.8, 0.99, 1e-3, 0.0, false, false},
    {"adam_amsgrad", false, 0.05, 0.9, 0.99, 1e-8, 0.0, true, false},
    {"adam_weight_decay", false, 0.02, 0.9, 0.999, 1e-8, 0.1, false, false},
    {"adam_amsgrad_decay_maximize", false, 0.02, 0.85, 0.95, 1e-6, 0.05, true, true},
    {"adamw", true, 0.01, 0.9, 0.999, 1e-8, 0.01, false, false},
    {"adamw_amsgrad", true, 0.05, 0.9, 0.99, 1e-8, 0.2, true, false},
};

// Kingma & Ba's algorithm with bias-corrected moments, plus torch's options:
// L2 decay enters the gradient, AdamW's decoupled decay shrinks p first.
std::vector<double> adam_by_hand(const AdamCase& c, std::vector<double> p, int steps) {
  std::vector<double> m(p.size()), v(p.size()), v_max(p.size());
  for (int t = 1; t <= steps; ++t) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = testing::rule_grad(p[i], i, t - 1);
      if (c.maximize) g = -g;
      if (c.decoupled) {
        p[i] *= 1.0 - c.lr * c.weight_decay;
      } else {
        g += c.weight_decay * p[i];
      }
      m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * g;
      v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * g * g;
      v_max[i] = std::max(v_max[i], v[i]);
      const double m_hat = m[i] / (1.0 - std::pow(c.beta1, t));
      const double v_hat = (c.amsgrad ? v_max[i] : v[i]) / (1.0 - std::pow(c.beta2, t));
      p[i] -= c.lr * m_hat / (std::sqrt(v_hat) + c.eps);
    }
  }
  return p;
}

Tensor run_adam(const AdamCase& c, DType dtype, int steps) {
  Tensor p = tensor(testing::kRuleStart, {3, 2}, {.dtype = dtype, .requires_grad = true});
  optim::AdamOptions o{.lr = c.lr,
                       .betas = {c.beta1, c.beta2},
                       .eps = c.eps,
                       .weight_decay = c.weight_decay,
                       .amsgrad = c.amsgrad,
                       .maximize = c.maximize};
  std::unique_ptr<optim::Optimizer> opt;
  if (c.decoupled) {
    opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p},
                                         optim::AdamWOptions{.lr = o.lr,
                                                             .betas = o.betas,
                                                             .eps = o.eps,
                                                             .weight_decay = o.weight_decay,
                                                             .amsgrad = o.amsgrad,
                                                             .maximize = o.maximize});
  } else {
    opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, o);
  }
  for (int t = 0; t < steps; ++t) {
    testing::set_rule_grad(p, t);
    opt->step();
  }
  return p;
}

TEST_CASE("Adam and AdamW follow the algorithm by hand for 7 float64 steps") {
  for (const AdamCase& c : kCases) {
    INFO(c.name);
    Tensor p = run_adam(c, DType::Float64, 7);
    CHECK_CLOSE(p, tensor(adam_by_hand(c, testing::kRuleStart, 7), {3, 2}, {.dtype = DType::Float64}), 1e-12,
                1e-14);
  }
}

TEST_CASE("Adam and AdamW in float32 stay within float32 rounding of the float64 rule") {
  for (const AdamCase& c : kCases) {
    INFO(c.name);
    Tensor p = run_adam(c, DType::Float32, 7);
    CHECK_CLOSE(p, tensor(adam_by_hand(c, testing::kRuleStart, 7), {3, 2}, {.dtype = DType::Float32}), 1e-5,
                1e-6);
  }
}

TEST_CASE("Adam's bias correction counts each parameter's own steps") {
  // b first gets a gradient at step 4: its update is then a first step,
  // lr * g / (|g| + eps), while a's continues from its state.
  Tensor a = tensor({1.0}, {1}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor b = tensor({1.0, -2.0}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  optim::Adam opt({a, b}, {.lr = 0.1});
  for (int t = 0; t < 3; ++t) {
    a.set_grad(tensor({0.5}, {1}, {.dtype = DType::Float64}));
    opt.step();
  }
  CHECK(b.to_vector<double>() == std::vector<double>{1.0, -2.0});
  a.set_grad(tensor({0.5}, {1}, {.dtype = DType::Float64}));
  b.set_grad(tensor({0.3, -4.0}, {2}, {.dtype = DType::Float64}));
  opt.step();
  CHECK(opt.state(0)->step == 4);
  CHECK(opt.state(1)->step == 1);
  CHECK_CLOSE(b, tensor({1.0 - 0.1 * 0.3 / (0.3 + 1e-8), -2.0 + 0.1 * 4.0 / (4.0 + 1e-8)}, {2},
                        {.dtype = DType::Float64}),
              1e-14, 0);
  // A constant gradient keeps |m_hat| / sqrt(v_hat) = 1: a moved lr per step.
  CHECK(a.item() == doctest::Approx(1.0 - 4 * 0.1).epsilon(1e-7));
}

TEST_CASE("AdamW defaults to torch's weight_decay 1e-2, Adam to 0") {
  Tensor p = zeros({1}, {.requires_grad = true});
  optim::Adam adam({p});
  optim::AdamW adamw({p.detach().clone().requires_grad_()});
  CHECK(*adam.param_groups()[0].weight_decay == 0.0);
  CHECK(*adamw.param_groups()[0].weight_decay == 0.01);
  CHECK(*adamw.param_groups()[0].lr == 1e-3);
  CHECK(adamw.param_groups()[0].betas == std::pair{0.9, 0.999});
  CHECK(adamw.name() == "AdamW");
}

TEST_CASE("Adam rejects bad arguments with messages that show the values") {
  Tensor p = zeros({2}, {.requires_grad = true});
  CHECK_THROWS_WITH_FRAGMENT(optim::Adam({p}, {.betas = {1.0, 0.999}}), ValueError,
                             "[Adam] group 0: betas must be in [0, 1), got (1, 0.999)");
  CHECK_THROWS_WITH_FRAGMENT(optim::AdamW({p}, {.eps = -1e-8}), ValueError,
                             "[AdamW] group 0: eps must be >= 0, got -1e-08");
  CHECK_THROWS_WITH_FRAGMENT(optim::Adam({p}, {.lr = -1}), ValueError, "lr must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(optim::Adam({p}, {.weight_decay = -0.5}), ValueError,
                             "weight_decay must be >= 0, got -0.5");
  CHECK_THROWS_WITH_FRAGMENT(
      optim::Adam(std::vector<optim::ParamGroup>{{.params = {p}, .momentum = 0.9}}), ValueError,
      "group 0 sets momentum, which Adam does not use");
}

}  // namespace
}  // namespace loom
