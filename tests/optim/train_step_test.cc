// File: tests/optim/train_step_test.cc
// TrainStep without a GPU: every step is eager, says why, and equals the
// hand-written zero_grad / forward / backward / step sequence.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "optim/train_step.h"
#include "tests/testing.h"

using namespace loom;

TEST_CASE("on the CPU TrainStep runs the eager step, bit for bit, and says why it did not capture") {
  Generator gen(11);
  Tensor x = randn({6, 1, 28, 28}, {}, &gen);
  Tensor y = randint(0, 10, {6}, {.dtype = DType::Int64}, &gen);
  manual_seed(5);
  nn::Sequential a = nn::lenet5();
  manual_seed(5);
  nn::Sequential b = nn::lenet5();
  optim::Adam opt_a(a.parameters(), {.lr = 1e-2});
  optim::Adam opt_b(b.parameters(), {.lr = 1e-2});
  optim::TrainStep step([&](const Tensor& xs, const Tensor& ys) {
    Tensor logits = a(xs);
    return std::vector<Tensor>{cross_entropy(logits, ys), logits};
  }, opt_a);
  for (int i = 0; i < 3; ++i) {
    const std::vector<Tensor>& out = step(x, y);
    opt_b.zero_grad();
    Tensor loss = cross_entropy(b(x), y);
    loss.backward();
    opt_b.step();
    CHECK(out[0].item() == loss.item());
    CHECK(out[1].sizes() == Shape{6, 10});
  }
  CHECK_FALSE(step.last_step_replayed());
  CHECK(step.stats().eager_steps == 3);
  CHECK_FALSE(step.fallback_reason().empty());
  auto sa = a.state_dict(), sb = b.state_dict();
  for (size_t k = 0; k < sa.size(); ++k) CHECK_CLOSE(sa[k].second, sb[k].second, 0, 0);
}

TEST_CASE("TrainStep rejects a step function that does not return the loss first") {
  manual_seed(1);
  nn::Sequential net = nn::lenet5();
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  optim::TrainStep step([&](const Tensor& x, const Tensor&) { return std::vector<Tensor>{net(x)}; }, opt);
  Generator gen(2);
  Tensor x = randn({2, 1, 28, 28}, {}, &gen);
  Tensor y = randint(0, 10, {2}, {.dtype = DType::Int64}, &gen);
  CHECK_THROWS_WITH_FRAGMENT(step(x, y), ValueError, "must return the scalar loss first, got (2, 10)");
  CHECK_THROWS_WITH_FRAGMENT(optim::TrainStep(nullptr, opt), ValueError, "[TrainStep]");
  CHECK_THROWS_WITH_FRAGMENT(optim::TrainStep([](const Tensor&, const Tensor&) { return std::vector<Tensor>{}; },
                                              opt, {.warmup_steps = 0}),
                             ValueError, "warmup_steps must be >= 1");
}

TEST_CASE("a step whose loss is not finite leaves the weights and optimizer state alone, and is counted") {
  Generator gen(3);
  Tensor x = randn({4, 1, 28, 28}, {}, &gen);
  Tensor y = randint(0, 10, {4}, {.dtype = DType::Int64}, &gen);
  Tensor poisoned = x.clone();
  poisoned.narrow(0, 1, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  for (bool skip : {true, false}) {
    CAPTURE(skip);
    manual_seed(2);
    nn::Sequential net = nn::lenet5();
    optim::Adam opt(net.parameters(), {.lr = 1e-2});
    optim::TrainStep step([&](const Tensor& xs, const Tensor& ys) {
      return std::vector<Tensor>{cross_entropy(net(xs), ys)};
    }, opt, {.skip_nonfinite = skip});
    step(x, y);
    StateDict before = net.state_dict();
    for (auto& [name, t] : before) t = t.clone();
    StateDict opt_before = opt.state_dict();
    for (auto& [name, t] : opt_before) t = t.clone();
    CHECK(std::isnan(step(poisoned, y)[0].item()));
    StateDict after = net.state_dict();
    if (skip) {
      for (size_t k = 0; k < after.size(); ++k) CHECK_CLOSE(after[k].second, before[k].second, 0, 0);
      StateDict opt_after = opt.state_dict();
      for (size_t k = 0; k < opt_after.size(); ++k) {
        CAPTURE(opt_after[k].first);
        CHECK_CLOSE(opt_after[k].second, opt_before[k].second, 0, 0);  // step counts included
      }
      CHECK(step.nonfinite_steps().skipped == 1);
      CHECK(step.nonfinite_steps().first == 2);
      step(x, y);  // and training goes on from the weights before the bad step
      CHECK(std::isfinite(step(x, y)[0].item()));
      CHECK(step.nonfinite_steps().skipped == 1);
    } else {
      CHECK(std::isnan(sum(after.front().second).item()));  // what skipping prevents
      CHECK(step.nonfinite_steps().skipped == 0);
    }
  }
}
