// File: tests/optim/skipped_step_test.cc
// A step skipped for a non-finite loss is no step at all: Adam's step count
// (its bias correction) and the LR schedule stay where they were, so training
// with a poisoned batch in between ends bit-identical to training without it.
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

namespace {

struct Run {
  StateDict weights, optimizer;
  int64_t schedule_steps = 0;
  double lr = 0;
};

// Adam under a OneCycle schedule over `batches` (x, y pairs), one TrainStep and
// one schedule step per batch, as the trainers do.
Run train(const std::vector<std::pair<Tensor, Tensor>>& batches) {
  manual_seed(5);
  nn::Sequential net(nn::Flatten(), nn::Linear(12, 8), nn::ReLU(), nn::Linear(8, 3));
  optim::Adam opt(net.parameters(), {.lr = 1e-2});
  optim::OneCycleLR schedule(opt, {.max_lr = 0.05, .total_steps = 10});
  optim::TrainStep step([&](const Tensor& xs, const Tensor& ys) {
    return std::vector<Tensor>{cross_entropy(net(xs), ys)};
  }, opt);
  for (const auto& [x, y] : batches) {
    step(x, y);
    schedule.step();
  }
  return {net.state_dict(), opt.state_dict(), schedule.last_step(), *opt.param_groups()[0].lr};
}

}  // namespace

TEST_CASE("a skipped CPU step advances neither Adam's step count nor the LR schedule") {
  Generator gen(9);
  std::vector<std::pair<Tensor, Tensor>> clean;
  for (int b = 0; b < 3; ++b) {
    clean.emplace_back(randn({4, 12}, {}, &gen), randint(0, 3, {4}, {.dtype = DType::Int64}, &gen));
  }
  Tensor poisoned = clean[0].first.clone();
  poisoned.narrow(0, 2, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  std::vector<std::pair<Tensor, Tensor>> with_bad = clean;
  with_bad.insert(with_bad.begin() + 1, {poisoned, clean[0].second});
  with_bad.insert(with_bad.begin() + 3, {poisoned, clean[1].second});

  const Run expected = train(clean), actual = train(with_bad);
  CHECK(actual.schedule_steps == 3);
  CHECK(actual.lr == expected.lr);
  REQUIRE(actual.weights.size() == expected.weights.size());
  for (size_t k = 0; k < actual.weights.size(); ++k) {
    CAPTURE(actual.weights[k].first);
    CHECK_CLOSE(actual.weights[k].second, expected.weights[k].second, 0, 0);
  }
  REQUIRE(actual.optimizer.size() == expected.optimizer.size());
  for (size_t k = 0; k < actual.optimizer.size(); ++k) {
    CAPTURE(actual.optimizer[k].first);
    // state.<i>.step included: 3 in both runs
    CHECK_CLOSE(actual.optimizer[k].second, expected.optimizer[k].second, 0, 0);
  }
}

TEST_CASE("a schedule stands still once per skipped step, and only for skips after it was built") {
  Tensor w = zeros({2});
  w.requires_grad_();
  optim::Adam opt({w}, {.lr = 1.0});
  opt.skip_step();  // before the schedule: not its concern
  optim::StepLR schedule(opt, 1, 0.5);
  opt.skip_step();
  opt.skip_step();
  CHECK(opt.skipped_steps() == 3);
  schedule.step();
  schedule.step();
  CHECK(schedule.last_step() == 0);
  CHECK(*opt.param_groups()[0].lr == 1.0);
  schedule.step();
  CHECK(schedule.last_step() == 1);
  CHECK(*opt.param_groups()[0].lr == 0.5);
}
