// File: tests/optim/optimizer_test.cc
// What every optimizer shares: parameter groups, zero_grad, state_dict names,
// save -> load into a fresh optimizer -> continue being bit-identical to an
// uninterrupted run, load errors that leave the optimizer as it was, layouts
// and dtypes, and a convex problem solved through autograd.
#include "optim/optimizer.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
#include "tests/optim/rule_steps.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

void set_grads(const std::vector<Tensor>& params, int t) {
  for (Tensor p : params) testing::set_rule_grad(p, t);
}

std::vector<std::string> names_of(const StateDict& state) {
  std::vector<std::string> names;
  for (const auto& [name, value] : state) names.push_back(name);
  return names;
}

Tensor entry(const StateDict& state, const std::string& name) {
  for (const auto& [key, value] : state) {
    if (key == name) return value;
  }
  FAIL("no entry " << name);
  return Tensor();
}

TEST_CASE("Parameter groups override the defaults, and unset fields take them") {
  Tensor a = tensor({1.0}, {1}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor b = tensor({1.0}, {1}, {.dtype = DType::Float64, .requires_grad = true});
  optim::SGD opt({{.params = {a}, .lr = 0.5}, {.params = {b}}}, {.lr = 0.1, .weight_decay = 0.5});
  const auto& groups = opt.param_groups();
  CHECK(*groups[0].lr == 0.5);
  CHECK(*groups[1].lr == 0.1);
  CHECK(*groups[1].weight_decay == 0.5);
  CHECK(*groups[1].momentum == 0.0);
  CHECK_FALSE(groups[1].betas.has_value());
  a.set_grad(ones({1}, kF64));
  b.set_grad(ones({1}, kF64));
  opt.step();
  CHECK(a.item() == 1.0 - 0.5 * 1.5);  // g = 1 + 0.5 * p
  CHECK(b.item() == 1.0 - 0.1 * 1.5);
}

TEST_CASE("zero_grad drops gradients, or zeroes them in place") {
  Tensor p = zeros({3}, {.requires_grad = true});
  optim::SGD opt({p});
  p.set_grad(ones({3}));
  opt.zero_grad(false);
  REQUIRE(p.grad().defined());
  CHECK(p.grad().to_vector<float>() == std::vector<float>{0, 0, 0});
  opt.zero_grad();
  CHECK_FALSE(p.grad().defined());
  opt.zero_grad(false);  // nothing to zero
  CHECK_FALSE(p.grad().defined());
}

TEST_CASE("state_dict names each group's hyper-parameters and each updated parameter's state") {
  Tensor a = zeros({2}, {.requires_grad = true});
  Tensor b = zeros({2, 2}, {.requires_grad = true});
  Tensor c = zeros({1}, {.requires_grad = true});
  optim::Adam opt({{.params = {a, b}}, {.params = {c}, .lr = 0.2}}, {.lr = 0.1, .amsgrad = true});
  for (int t = 0; t < 2; ++t) {
    set_grads({a, b}, t);
    opt.step();
  }
  const StateDict state = opt.state_dict();
  const std::vector<std::string> expected = {
      "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq",
      "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.max_exp_avg_sq",
      "param_groups.0.params", "param_groups.0.lr", "param_groups.0.betas",
      "param_groups.0.eps", "param_groups.0.weight_decay", "param_groups.0.amsgrad",
      "param_groups.0.maximize", "param_groups.1.params", "param_groups.1.lr",
      "param_groups.1.betas", "param_groups.1.eps", "param_groups.1.weight_decay",
      "param_groups.1.amsgrad", "param_groups.1.maximize"};
  CHECK(names_of(state) == expected);
  CHECK(entry(state, "state.0.step").dtype() == DType::Int64);
  CHECK(entry(state, "state.0.step").dim() == 0);
  CHECK(entry(state, "state.1.step").item() == 2);
  CHECK(entry(state, "state.1.exp_avg").sizes() == Shape{2, 2});
  CHECK(entry(state, "param_groups.1.lr").dtype() == DType::Float64);
  CHECK(entry(state, "param_groups.1.lr").item() == 0.2);
  CHECK(entry(state, "param_groups.0.amsgrad").item() == 1.0);
  CHECK(entry(state, "param_groups.0.betas").to_vector<double>() == std::vector<double>{0.9, 0.999});
  CHECK(entry(state, "param_groups.0.params").to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(entry(state, "param_groups.1.params").to_vector<int64_t>() == std::vector<int64_t>{2});
}

// ---- resume ----------------------------------------------------------------------------

using Factory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

std::vector<Tensor> fresh_params() {
  Generator gen(7);
  return {randn({3, 4}, {.requires_grad = true}, &gen), randn({5}, {.requires_grad = true}, &gen),
          randn({2, 3, 2, 2}, {}, &gen).contiguous(MemoryFormat::ChannelsLast).requires_grad_()};
}

std::vector<Tensor> copies(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

void train(optim::Optimizer& opt, const std::vector<Tensor>& params, int from, int to) {
  for (int t = from; t < to; ++t) {
    if (t == 2) opt.param_groups()[0].lr = *opt.param_groups()[0].lr * 0.5;  // as a schedule would
    set_grads(params, t);
    opt.step();
  }
}

StateDict snapshot(const StateDict& state) {
  StateDict out;
  for (const auto& [name, value] : state) out.emplace_back(name, value.clone());
  return out;
}

void check_resume_is_bit_identical(const Factory& make) {
  std::vector<Tensor> straight = fresh_params();
  train(*make(straight), straight, 0, 7);

  std::vector<Tensor> first_half = fresh_params();
  StateDict saved;
  {
    auto opt = make(first_half);
    train(*opt, first_half, 0, 3);
    saved = snapshot(opt->state_dict());
  }
  std::vector<Tensor> resumed = copies(first_half);
  auto opt = make(resumed);
  opt->load_state_dict(saved);
  train(*opt, resumed, 3, 7);
  for (size_t k = 0; k < straight.size(); ++k) {
    CHECK(resumed[k].to_vector<float>() == straight[k].to_vector<float>());
  }
}

TEST_CASE("save -> load into a fresh optimizer -> continue is bit-identical to one run") {
  SUBCASE("SGD, Nesterov momentum, weight decay, two groups") {
    check_resume_is_bit_identical([](const std::vector<Tensor>& p) {
      return std::make_unique<optim::SGD>(
          std::vector<optim::ParamGroup>{{.params = {p[0], p[2]}}, {.params = {p[1]}, .lr = 0.03}},
          optim::SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-2});
    });
  }
  SUBCASE("SGD with dampening") {
    check_resume_is_bit_identical([](const std::vector<Tensor>& p) {
      return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1, .momentum = 0.8, .dampening = 0.3});
    });
  }
  SUBCASE("Adam with amsgrad") {
    check_resume_is_bit_identical([](const std::vector<Tensor>& p) {
      return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.05, .amsgrad = true});
    });
  }
  SUBCASE("AdamW") {
    check_resume_is_bit_identical([](const std::vector<Tensor>& p) {
      return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.1});
    });
  }
  SUBCASE("Adagrad with lr_decay and an initial accumulator") {
    check_resume_is_bit_identical([](const std::vector<Tensor>& p) {
      return std::make_unique<optim::Adagrad>(
          p, optim::AdagradOptions{.lr = 0.05, .lr_decay = 0.1, .initial_accumulator_value = 0.2});
    });
  }
  SUBCASE("RMSprop, centered with momentum, two groups") {
    check_resume_is_bit_identical([](const std::vector<Tensor>& p) {
      return std::make_unique<optim::RMSprop>(
          std::vector<optim::ParamGroup>{{.params = {p[0], p[1]}}, {.params = {p[2]}, .alpha = 0.9}},
          optim::RmspropOptions{.lr = 0.01, .momentum = 0.9, .centered = true});
    });
  }
}

TEST_CASE("load_state_dict restores hyper-parameters, copying buffers to the parameter's layout") {
  Tensor p = zeros({1, 2, 2, 2}).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  optim::SGD source({p}, {.lr = 0.1, .momentum = 0.9});
  set_grads({p}, 0);
  source.step();
  source.param_groups()[0].lr = 0.025;
  Tensor q = zeros({1, 2, 2, 2}).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  optim::SGD target({q}, {.lr = 0.5, .momentum = 0.9});
  StateDict state = source.state_dict();
  for (auto& [name, value] : state) value = value.contiguous();  // as a file would hold it
  target.load_state_dict(state);
  CHECK(*target.param_groups()[0].lr == 0.025);
  REQUIRE(target.state(0) != nullptr);
  CHECK(target.state(0)->step == 1);
  const Tensor& buffer = target.state(0)->buffers.at(0).second;
  CHECK(buffer.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(buffer, source.state(0)->buffers.at(0).second, 0, 0);
}

TEST_CASE("load_state_dict rejects a state that does not fit, and then changes nothing") {
  Tensor p = zeros({3}, {.requires_grad = true});
  Tensor q = zeros({2}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});

  optim::SGD two({p, q}, {.lr = 0.1});
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(two.state_dict()), ValueError,
                             "[SGD load_state_dict] group 0 holds parameters [0, 1] in the state "
                             "but [0] here");

  Tensor small = zeros({2}, {.requires_grad = true});
  optim::SGD other({small}, {.lr = 0.1, .momentum = 0.9});
  set_grads({small}, 0);
  other.step();
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(other.state_dict()), ShapeError,
                             "state.0.momentum_buffer has shape (2,) but parameter 0 has shape (3,)");

  Tensor r = zeros({3}, {.requires_grad = true});
  optim::Adam adam({r});
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(adam.state_dict()), ValueError,
                             "param_groups.0.betas is not a hyper-parameter of this optimizer");

  StateDict state = opt.state_dict();
  state.emplace_back("momentum", zeros({1}));
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(state), ValueError, "unexpected entry 'momentum'");

  state = opt.state_dict();
  std::erase_if(state, [](const auto& e) { return e.first == "param_groups.0.lr"; });
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(state), ValueError,
                             "the state lacks param_groups.0.lr");

  state = opt.state_dict();
  for (auto& [name, value] : state) {
    if (name == "param_groups.0.lr") value = tensor({-1.0}, {}, kF64);
  }
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(state), ValueError, "lr must be >= 0, got -1");

  // A state whose lr is fine but whose last entry is bad leaves the lr alone.
  state = opt.state_dict();
  for (auto& [name, value] : state) {
    if (name == "param_groups.0.lr") value = tensor({0.7}, {}, kF64);
  }
  state.emplace_back("state.0.exp_avg", zeros({3}));
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(state), ValueError,
                             "state.0.exp_avg is not a buffer of this optimizer (its buffers: "
                             "momentum_buffer)");
  CHECK(*opt.param_groups()[0].lr == 0.1);
  CHECK(opt.state(0) == nullptr);
}

// The state of an SGD (momentum) after one step over p of 3 elements, with
// entry `name` replaced by `value`.
StateDict sgd_state_with(const std::string& name, const Tensor& value) {
  Tensor p = zeros({3}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  set_grads({p}, 0);
  opt.step();
  StateDict state = opt.state_dict();
  for (auto& [key, entry] : state) {
    if (key == name) entry = value;
  }
  return state;
}

TEST_CASE("a loaded step count is range-checked before any conversion, and its value named") {
  // CRC-valid checkpoints carried these: 1e30 was cast to int64 (undefined
  // behaviour), 2^63 loaded, 2.5 became 2, and a negative step said "got shape ()".
  Tensor p = zeros({3}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  const double nan = std::nan(""), inf = INFINITY;
  static constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
  const std::vector<std::pair<Tensor, std::string>> bad = {
      {full({}, 1e30, {.dtype = DType::Float32}), "holds 1.0000000150474662e+30"},
      {full({}, 9223372036854775808.0, kF64), "holds 9.223372036854776e+18"},
      {full({}, 2.5, kF64), "holds 2.5"},
      {full({}, -1, kF64), "holds -1"},
      {full({}, nan, kF64), "holds nan"},
      {full({}, inf, kF64), "holds inf"},
      {from_host(&kMaxInt64, DType::Int64, {}, {.dtype = DType::Int64}), "holds 9223372036854775807"},
      {full({}, -3, {.dtype = DType::Int64}), "holds -3"},
      {zeros({2}, {.dtype = DType::Int64}), "must be one count, got shape (2,)"},
  };
  for (const auto& [value, message] : bad) {
    INFO(message);
    CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(sgd_state_with("state.0.step", value)),
                               ValueError, "[SGD load_state_dict] state.0.step " + message);
  }
  CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(sgd_state_with("state.0.step", full({}, -1, kF64))),
                             ValueError, "expected a whole number from 0 to 9007199254740992");
  CHECK(opt.state(0) == nullptr);  // nothing loaded
  opt.load_state_dict(sgd_state_with("state.0.step", full({}, 5, kF64)));
  CHECK(opt.state(0)->step == 5);
  opt.load_state_dict(sgd_state_with("state.0.step", full({}, 9007199254740992.0, {.dtype = DType::Int64})));
  CHECK(opt.state(0)->step == int64_t{1} << 53);
}

TEST_CASE("every other number of a loaded state is checked: indices, hyper-parameters, buffers") {
  Tensor p = zeros({3}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_WITH_FRAGMENT(
      opt.load_state_dict(sgd_state_with("param_groups.0.params", tensor({1e30}, {1}))), ValueError,
      "[SGD load_state_dict] param_groups.0.params holds 1.0000000150474662e+30");
  CHECK_THROWS_WITH_FRAGMENT(
      opt.load_state_dict(sgd_state_with("param_groups.0.params", tensor({0.5}, {1}, kF64))),
      ValueError, "param_groups.0.params holds 0.5");
  for (const char* hyper : {"param_groups.0.lr", "param_groups.0.momentum",
                            "param_groups.0.dampening", "param_groups.0.weight_decay"}) {
    INFO(hyper);
    CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(sgd_state_with(hyper, full({}, INFINITY, kF64))),
                               ValueError, "must be finite, got inf");
    CHECK_THROWS_WITH_FRAGMENT(opt.load_state_dict(sgd_state_with(hyper, full({}, std::nan(""), kF64))),
                               ValueError, "must be finite, got nan");
  }
  CHECK_THROWS_WITH_FRAGMENT(
      opt.load_state_dict(sgd_state_with("param_groups.0.nesterov", full({}, 0.5, kF64))), ValueError,
      "[SGD load_state_dict] param_groups.0.nesterov is 0.5; a flag is 0 or 1");
  CHECK_THROWS_WITH_FRAGMENT(
      opt.load_state_dict(sgd_state_with("state.0.momentum_buffer", tensor({0.0, std::nan(""), 1.0}, {3}))),
      ValueError, "[SGD load_state_dict] state.0.momentum_buffer holds nan at element 1");
  CHECK(*opt.param_groups()[0].lr == 0.1);
  // The same checks guard the constructor: inf passed lr >= 0.
  CHECK_THROWS_WITH_FRAGMENT(optim::SGD({p}, {.lr = INFINITY}), ValueError,
                             "[SGD] group 0: lr must be finite, got inf");
  CHECK_THROWS_WITH_FRAGMENT(optim::Adam({p}, {.eps = INFINITY}), ValueError,
                             "[Adam] group 0: eps must be finite, got inf");

  Tensor r = zeros({3}, {.requires_grad = true});
  optim::Adam adam({r}, {.lr = 0.1});
  set_grads({r}, 0);
  adam.step();
  StateDict state = adam.state_dict();
  for (auto& [key, value] : state) {
    if (key == "state.0.exp_avg_sq") value = tensor({0.5, -0.25, 0.5}, {3});
  }
  CHECK_THROWS_WITH_FRAGMENT(adam.load_state_dict(state), ValueError,
                             "[Adam load_state_dict] state.0.exp_avg_sq holds -0.25 at element 1; a "
                             "mean of squared gradients is >= 0");
  for (auto& [key, value] : state) {
    if (key == "state.0.exp_avg_sq") value = tensor({0.1, 0.2, 0.3}, {3});
    if (key == "state.0.exp_avg") value = tensor({0.1, 0.2, -INFINITY}, {3});
  }
  CHECK_THROWS_WITH_FRAGMENT(adam.load_state_dict(state), ValueError,
                             "state.0.exp_avg holds -inf at element 2");
}

TEST_CASE("A channels-last parameter with a contiguous gradient updates like a contiguous one") {
  Generator gen(3);
  Tensor values = randn({2, 3, 2, 2}, kF64, &gen);
  Tensor nhwc = values.contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  Tensor nchw = values.clone(MemoryFormat::Contiguous).requires_grad_();
  optim::Adam a({nhwc}, {.lr = 0.1});
  optim::Adam b({nchw}, {.lr = 0.1});
  for (int t = 0; t < 3; ++t) {
    Tensor g = randn({2, 3, 2, 2}, kF64, &gen);  // contiguous
    nhwc.set_grad(g);
    nchw.set_grad(g.clone());
    a.step();
    b.step();
  }
  CHECK(nhwc.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(nhwc, nchw, 0, 0);
  CHECK_CLOSE(a.state(0)->buffers.at(1).second, b.state(0)->buffers.at(1).second, 0, 0);
}

TEST_CASE("A group mixing float32 and float64 parameters updates each in its own dtype") {
  Tensor p32 = tensor({0.5, -1.5}, {2}, {.requires_grad = true});
  Tensor p64 = tensor({0.5, -1.5}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor alone32 = p32.detach().clone().requires_grad_();
  Tensor alone64 = p64.detach().clone().requires_grad_();
  optim::Adam mixed({p32, p64}, {.lr = 0.1, .amsgrad = true});
  optim::Adam only32({alone32}, {.lr = 0.1, .amsgrad = true});
  optim::Adam only64({alone64}, {.lr = 0.1, .amsgrad = true});
  for (int t = 0; t < 4; ++t) {
    set_grads({p32, p64, alone32, alone64}, t);
    mixed.step();
    only32.step();
    only64.step();
  }
  CHECK(p32.dtype() == DType::Float32);
  CHECK_CLOSE(p32, alone32, 0, 0);
  CHECK_CLOSE(p64, alone64, 0, 0);
}

TEST_CASE("Every optimizer brings a convex quadratic's loss down in 20 steps") {
  const Tensor target = tensor({-1.0, -0.5, 0.25, 0.75, 1.0, 0.0}, {6}, kF64);
  const Tensor weight = tensor({1.0, 1.2, 1.4, 1.6, 1.8, 2.0}, {6}, kF64);
  auto loss_of = [&](const Tensor& x) {
    Tensor d = sub(x, target);
    return sum(mul(weight, mul(d, d)));
  };
  const std::vector<std::pair<const char*, Factory>> optimizers = {
      {"sgd", [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1});
       }},
      {"sgd_nesterov", [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::SGD>(
             p, optim::SgdOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
       }},
      {"adam", [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.1});
       }},
      {"adamw", [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 0.1});
       }},
  };
  for (const auto& [name, make] : optimizers) {
    INFO(name);
    Tensor x = zeros({6}, {.dtype = DType::Float64, .requires_grad = true});
    auto opt = make({x});
    const double initial = loss_of(x).item();
    for (int t = 0; t < 20; ++t) {
      opt->zero_grad();
      Tensor loss = loss_of(x);
      loss.backward();
      opt->step();
    }
    const double final_loss = loss_of(x).item();
    CHECK(final_loss < 0.1 * initial);
  }
}

}  // namespace
}  // namespace loom
