// File: tests/optim/sgd_test.cc
// SGD against torch.optim.SGD's update rule written out by hand (7 float64
// steps; plain, momentum, dampening, Nesterov, weight decay, maximize), a
// parameter without a gradient, float32, and argument errors.
#include "optim/sgd.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/elementwise.h"
#include "tests/optim/rule_steps.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct SgdCase {
  const char* name;
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
};

const SgdCase kCases[] = {
    {"plain", 0.1, 0.0, 0.0, 0.0, false, false},
    {"momentum", 0.1, 0.9, 0.0, 0.0, false, false},
    {"dampening", 0.05, 0.8, 0.3, 0.0, false, false},
    {"nesterov", 0.1, 0.9, 0.0, 0.0, true, false},
    {"weight_decay", 0.1, 0.0, 0.0, 0.05, false, false},
    {"everything", 0.07, 0.85, 0.0, 0.01, true, false},
    {"momentum_decay_dampening_maximize", 0.03, 0.7, 0.2, 0.02, false, true},
};

// torch.optim.SGD's documented algorithm, element by element.
std::vector<double> sgd_by_hand(const SgdCase& c, std::vector<double> p, int steps) {
  std::vector<double> buf(p.size());
  for (int t = 0; t < steps; ++t) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = testing::rule_grad(p[i], i, t);
      if (c.maximize) g = -g;
      g += c.weight_decay * p[i];
      if (c.momentum != 0.0) {
        buf[i] = t == 0 ? g : c.momentum * buf[i] + (1.0 - c.dampening) * g;
        g = c.nesterov ? g + c.momentum * buf[i] : buf[i];
      }
      p[i] -= c.lr * g;
    }
  }
  return p;
}

Tensor run_sgd(const SgdCase& c, DType dtype, int steps) {
  Tensor p = tensor(testing::kRuleStart, {2, 3}, {.dtype = dtype, .requires_grad = true});
  optim::SGD opt({p}, {.lr = c.lr,
                       .momentum = c.momentum,
                       .dampening = c.dampening,
                       .nesterov = c.nesterov,
                       .weight_decay = c.weight_decay,
                       .maximize = c.maximize});
  for (int t = 0; t < steps; ++t) {
    testing::set_rule_grad(p, t);
    opt.step();
  }
  return p;
}

TEST_CASE("SGD follows torch.optim.SGD's rule for 7 float64 steps") {
  for (const SgdCase& c : kCases) {
    INFO(c.name);
    Tensor p = run_sgd(c, DType::Float64, 7);
    CHECK_CLOSE(p, tensor(sgd_by_hand(c, testing::kRuleStart, 7), {2, 3}, {.dtype = DType::Float64}), 1e-13,
                1e-15);
  }
}

TEST_CASE("SGD in float32 stays within float32 rounding of the float64 rule") {
  for (const SgdCase& c : kCases) {
    INFO(c.name);
    Tensor p = run_sgd(c, DType::Float32, 7);
    CHECK(p.dtype() == DType::Float32);
    CHECK_CLOSE(p, tensor(sgd_by_hand(c, testing::kRuleStart, 7), {2, 3}, {.dtype = DType::Float32}), 1e-5,
                1e-6);
  }
}

TEST_CASE("SGD leaves a parameter without a gradient untouched, then starts its buffer") {
  Tensor a = tensor({1.0, 2.0}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor b = tensor({-3.0, 4.0}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  optim::SGD opt({a, b}, {.lr = 0.5, .momentum = 0.9, .dampening = 0.5});
  for (int t = 0; t < 3; ++t) {
    a.set_grad(tensor({1.0, 1.0}, {2}, {.dtype = DType::Float64}));
    opt.step();
  }
  CHECK(b.to_vector<double>() == std::vector<double>{-3.0, 4.0});
  CHECK(opt.state(1) == nullptr);
  REQUIRE(opt.state(0) != nullptr);
  CHECK(opt.state(0)->step == 3);
  // b's first update: its buffer is its gradient (no dampening on the first step).
  a.set_grad(Tensor());
  b.set_grad(tensor({2.0, -1.0}, {2}, {.dtype = DType::Float64}));
  const std::vector<double> a_before = a.to_vector<double>();
  opt.step();
  CHECK(a.to_vector<double>() == a_before);
  CHECK_CLOSE(b, tensor({-4.0, 4.5}, {2}, {.dtype = DType::Float64}), 0, 0);
  REQUIRE(opt.state(1) != nullptr);
  CHECK(opt.state(1)->step == 1);
  CHECK_CLOSE(opt.state(1)->buffers.at(0).second, tensor({2.0, -1.0}, {2}, {.dtype = DType::Float64}),
              0, 0);
}

TEST_CASE("SGD updates an empty parameter without complaint") {
  Tensor empty_param = zeros({0, 3}, {.requires_grad = true});
  Tensor p = tensor({1.0}, {1}, {.requires_grad = true});
  optim::SGD opt({empty_param, p}, {.lr = 1.0, .momentum = 0.5});
  empty_param.set_grad(zeros({0, 3}));
  p.set_grad(tensor({0.25}, {1}));
  opt.step();
  CHECK(p.item() == 0.75);
  CHECK(empty_param.numel() == 0);
}

TEST_CASE("SGD rejects bad arguments with messages that show the values") {
  Tensor p = zeros({2}, {.requires_grad = true});
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD({p}, {.lr = -0.1}), ValueError,
                             "[SGD] group 0: lr must be >= 0, got -0.1");
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD({p}, {.momentum = -1}), ValueError, "momentum must be >= 0");
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD({p}, {.weight_decay = -1}), ValueError,
                             "weight_decay must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), ValueError,
                             "nesterov needs momentum > 0 and dampening 0, got momentum 0");
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD(std::vector<Tensor>{}), ValueError,
                             "[SGD] got an empty parameter list");
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD({zeros({3}, {.dtype = DType::Int64})}), TypeError,
                             "has dtype int64");
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD({p, p}), ValueError,
                             "parameter 1 (group 0) is the same tensor as parameter 0");
  Tensor non_leaf = mul(p, 2.0);
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD({non_leaf}), ValueError, "is not a leaf tensor");
  Tensor strided = zeros({4, 4}).slice(1, 0, 4, 2).detach().requires_grad_();
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD({strided}), ValueError, "strides (4, 2)) is not dense");
  CHECK_THROWS_WITH_FRAGMENT(
      optim::SGD(std::vector<optim::ParamGroup>{{.params = {p}, .betas = std::pair{0.9, 0.99}}}),
      ValueError, "group 0 sets betas, which SGD does not use");
}

TEST_CASE("SGD checks hyper-parameters changed after construction at the next step") {
  Tensor p = zeros({2}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.1});
  opt.param_groups()[0].lr = -1.0;
  p.set_grad(ones({2}));
  CHECK_THROWS_WITH_FRAGMENT(opt.step(), ValueError, "lr must be >= 0, got -1");
  CHECK(p.to_vector<double>() == std::vector<double>{0.0, 0.0});
}

}  // namespace
}  // namespace loom
