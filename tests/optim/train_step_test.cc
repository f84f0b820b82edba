// File: tests/optim/train_step_test.cc
// TrainStep without a GPU: every step is eager, says why, and equals the
// hand-written zero_grad / forward / backward / step sequence.
#include <doctest/doctest.h>

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
