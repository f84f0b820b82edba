// File: tests/optim/scheduler_test.cc
// The schedules' lr sequences against values worked out by hand from their
// definitions (torch's for StepLR, MultiStepLR and OneCycleLR), momentum
// cycling, resume through state_dict and through a training checkpoint file,
// and argument errors.
#include "optim/scheduler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/error.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/testing.h"

namespace loom {
namespace {

// The lr of group `g` after construction and after each of steps 1, 2, ...
std::vector<double> lrs(optim::LRScheduler& schedule, optim::Optimizer& opt, int steps,
                        size_t g = 0) {
  std::vector<double> out = {*opt.param_groups()[g].lr};
  for (int s = 0; s < steps; ++s) {
    schedule.step();
    out.push_back(*opt.param_groups()[g].lr);
  }
  return out;
}

void check_sequence(const std::vector<double>& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (size_t s = 0; s < actual.size(); ++s) {
    INFO("step " << s);
    CHECK(actual[s] == doctest::Approx(expected[s]).epsilon(1e-12));
  }
}

Tensor param() { return zeros({2}, {.requires_grad = true}); }

TEST_CASE("StepLR multiplies by gamma every step_size steps, per group") {
  optim::SGD opt({{.params = {param()}, .lr = 0.1}, {.params = {param()}, .lr = 1.0}});
  optim::StepLR schedule(opt, 3, 0.5);
  std::vector<double> group1 = {*opt.param_groups()[1].lr};
  std::vector<double> group0 = {*opt.param_groups()[0].lr};
  for (int s = 0; s < 7; ++s) {
    schedule.step();
    group0.push_back(*opt.param_groups()[0].lr);
    group1.push_back(*opt.param_groups()[1].lr);
  }
  check_sequence(group0, {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025});
  check_sequence(group1, {1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25});
  CHECK(schedule.last_step() == 7);
}

TEST_CASE("MultiStepLR multiplies by gamma at each milestone (given in any order)") {
  optim::SGD opt({param()}, {.lr = 2.0});
  optim::MultiStepLR schedule(opt, {5, 2}, 0.1);
  check_sequence(lrs(schedule, opt, 6), {2.0, 2.0, 0.2, 0.2, 0.2, 0.02, 0.02});
}

TEST_CASE("CosineAnnealingLR warms up linearly, then follows a half cosine to min_lr") {
  optim::SGD opt({param()}, {.lr = 1.0});
  optim::CosineAnnealingLR schedule(opt, {.total_steps = 12, .warmup_steps = 4, .min_lr = 0.1});
  // warmup (s + 1) / 4; then 0.1 + 0.9 * (1 + cos(pi * (s - 4) / 8)) / 2; then 0.1
  check_sequence(lrs(schedule, opt, 13),
                 {0.25, 0.5, 0.75, 1.0, 1.0, 0.9657457896300791, 0.8681980515339464,
                  0.7222075445642904, 0.55, 0.3777924554357096, 0.23180194846605365,
                  0.13425421036992097, 0.1, 0.1});
}

TEST_CASE("CosineAnnealingLR without warmup is torch's CosineAnnealingLR") {
  optim::SGD opt({param()}, {.lr = 0.4});
  optim::CosineAnnealingLR schedule(opt, {.total_steps = 4});
  // 0.4 * (1 + cos(pi * s / 4)) / 2
  check_sequence(lrs(schedule, opt, 4), {0.4, 0.3414213562373095, 0.2, 0.05857864376269051, 0.0});
}

TEST_CASE("OneCycleLR follows torch's two phases and cycles SGD's momentum") {
  optim::SGD opt({param()}, {.lr = 0.123, .momentum = 0.9});
  optim::OneCycleLR schedule(opt, {.max_lr = 1.0, .total_steps = 10});
  // Phase 1 ends at 0.3 * 10 - 1 = 2: 0.04 -> 1; phase 2 ends at 9: 1 -> 0.04 / 1e4;
  // each lr = end + (start - end) / 2 * (cos(pi * pct) + 1).
  const std::vector<double> expected_lr = {
      0.04, 0.52, 1.0, 0.9504846320134737, 0.8117456539497631, 0.6112620219362893,
      0.38874197806371075, 0.18825834605023697, 0.049519367986526286, 4e-06,
      0.04951936798652623};
  const std::vector<double> expected_momentum = {
      0.95, 0.9, 0.85, 0.854951556604879, 0.8688255099070633, 0.8888739533021842,
      0.9111260466978157, 0.9311744900929366, 0.945048443395121, 0.95, 0.945048443395121};
  std::vector<double> lr = {*opt.param_groups()[0].lr};
  std::vector<double> momentum = {*opt.param_groups()[0].momentum};
  for (int s = 0; s < 10; ++s) {
    schedule.step();
    lr.push_back(*opt.param_groups()[0].lr);
    momentum.push_back(*opt.param_groups()[0].momentum);
  }
  check_sequence(lr, expected_lr);
  check_sequence(momentum, expected_momentum);
  CHECK_THROWS_WITH_FRAGMENT(schedule.step(), ValueError, "step 11 is past total_steps 10");
  CHECK(schedule.last_step() == 10);
  CHECK(*opt.param_groups()[0].lr == doctest::Approx(expected_lr.back()).epsilon(1e-12));
}

TEST_CASE("OneCycleLR cycles Adam's beta1 and can leave momentum alone") {
  optim::Adam adam({param()}, {.betas = {0.9, 0.98}});
  optim::OneCycleLR cycling(adam, {.max_lr = 0.01, .total_steps = 10});
  CHECK(adam.param_groups()[0].betas == std::pair{0.95, 0.98});
  cycling.step();
  CHECK(adam.param_groups()[0].betas->first == doctest::Approx(0.9).epsilon(1e-12));
  CHECK(adam.param_groups()[0].betas->second == 0.98);

  optim::SGD sgd({param()}, {.momentum = 0.5});
  optim::OneCycleLR fixed(sgd, {.max_lr = 0.01, .total_steps = 10, .cycle_momentum = false});
  fixed.step();
  CHECK(*sgd.param_groups()[0].momentum == 0.5);
}

TEST_CASE("OneCycleLR with three phases and linear annealing") {
  optim::SGD opt({param()}, {.momentum = 0.9});
  optim::OneCycleLR schedule(opt, {.max_lr = 1.0,
                                   .total_steps = 10,
                                   .pct_start = 0.25,
                                   .anneal_strategy = optim::Anneal::Linear,
                                   .div_factor = 10.0,
                                   .final_div_factor = 100.0,
                                   .three_phase = true});
  // phases end at 1.5, 3, 9: 0.1 -> 1 -> 0.1 -> 0.001, linearly in (s - start) / (end - start)
  check_sequence(lrs(schedule, opt, 10),
                 {0.1, 0.1 + 0.9 / 1.5, 1.0 - 0.9 * 0.5 / 1.5, 0.1, 0.1 - 0.099 / 6,
                  0.1 - 0.099 * 2 / 6, 0.1 - 0.099 * 3 / 6, 0.1 - 0.099 * 4 / 6,
                  0.1 - 0.099 * 5 / 6, 0.001, 0.001 - 0.099 / 6});
}

TEST_CASE("ExponentialLR, LinearLR and LambdaLR follow torch's closed forms") {
  optim::SGD opt({param()}, {.lr = 2.0});
  optim::ExponentialLR exponential(opt, 0.5);
  check_sequence(lrs(exponential, opt, 3), {2.0, 1.0, 0.5, 0.25});

  optim::SGD linear_opt({param()}, {.lr = 1.0});
  optim::LinearLR linear(linear_opt, {.start_factor = 0.25, .end_factor = 1.0, .total_steps = 4});
  // torch 1.13's LinearLR(start_factor=0.25, total_iters=4) on lr 1.0.
  check_sequence(lrs(linear, linear_opt, 6), {0.25, 0.4375, 0.625, 0.8125, 1.0, 1.0, 1.0});

  optim::SGD lambda_opt({param()}, {.lr = 0.1});
  optim::LambdaLR warmup(lambda_opt, [](int64_t step) { return std::min(1.0, static_cast<double>(step + 1) / 4); });
  check_sequence(lrs(warmup, lambda_opt, 5), {0.025, 0.05, 0.075, 0.1, 0.1, 0.1});
  const StateDict saved = warmup.state_dict();
  optim::LambdaLR resumed(lambda_opt, [](int64_t step) { return std::min(1.0, static_cast<double>(step + 1) / 4); });
  resumed.load_state_dict(saved);
  CHECK(resumed.last_step() == 5);
  CHECK(resumed.base_lrs() == std::vector<double>{0.1});

  optim::LambdaLR broken(lambda_opt, [](int64_t step) { return step < 2 ? 1.0 : -1.0; });
  broken.step();
  CHECK_THROWS_WITH_FRAGMENT(broken.step(), ValueError,
                             "[LambdaLR] the factor function gave -1 at step 2; it must give a finite number >= 0");
  CHECK(*lambda_opt.param_groups()[0].lr == doctest::Approx(0.1));  // a refused step sets nothing
  CHECK_THROWS_WITH_FRAGMENT(optim::ExponentialLR(opt, -0.5), ValueError, "[ExponentialLR] gamma must be >= 0");
  CHECK_THROWS_WITH_FRAGMENT(optim::LinearLR(opt, {.start_factor = 0.0}), ValueError,
                             "[LinearLR] needs start_factor in (0, 1] and end_factor in [0, 1], got 0 and 1");
  CHECK_THROWS_WITH_FRAGMENT(optim::LinearLR(opt, {.total_steps = 0}), ValueError,
                             "[LinearLR] total_steps must be > 0, got 0");
  CHECK_THROWS_WITH_FRAGMENT(optim::LambdaLR(opt, nullptr), ValueError, "[LambdaLR] the factor function is empty");
}

TEST_CASE("ReduceLROnPlateau cuts the lr after patience bad steps, waits out its cooldown, stops at min_lr") {
  optim::SGD opt({param()}, {.lr = 1.0});
  optim::ReduceLROnPlateau plateau(opt, {.factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.1});
  const std::vector<double> metrics = {1.0, 0.9, 0.95, 0.95, 0.95, 0.95, 0.95, 0.8,
                                       0.8, 0.8, 0.8, 0.8, std::nan(""), 0.8, 0.8, 0.8};
  // torch 1.13's ReduceLROnPlateau(factor=0.5, patience=2, cooldown=1, min_lr=0.1) on these metrics.
  const std::vector<double> expected_lrs = {1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.125,
                                            0.125};
  const std::vector<int64_t> expected_bad = {0, 0, 1, 2, 0, 0, 1, 0, 1, 2, 0, 0, 1, 2, 0, 0};
  for (size_t k = 0; k < metrics.size(); ++k) {
    INFO("step " << k + 1);
    plateau.step(metrics[k]);
    CHECK(*opt.param_groups()[0].lr == expected_lrs[k]);
    CHECK(plateau.bad_steps() == expected_bad[k]);
  }
  CHECK(plateau.best() == 0.8);
  CHECK(plateau.last_step() == 16);
  for (int k = 0; k < 8; ++k) plateau.step(1.0);
  CHECK(*opt.param_groups()[0].lr == 0.1);  // 0.125 * 0.5 stops at min_lr, and stays there

  optim::SGD max_opt({param()}, {.lr = 1.0});
  optim::ReduceLROnPlateau accuracy(max_opt, {.mode = optim::PlateauMode::Max, .factor = 0.1, .patience = 0,
                                              .threshold = 0.01, .threshold_mode = optim::PlateauThreshold::Abs});
  std::vector<double> lrs_seen;
  for (double metric : {0.5, 0.505, 0.52, 0.52}) {
    accuracy.step(metric);
    lrs_seen.push_back(*max_opt.param_groups()[0].lr);
  }
  check_sequence(lrs_seen, {1.0, 0.1, 0.1, 0.01});  // 0.505 is not 0.01 better than 0.5
}

TEST_CASE("ReduceLROnPlateau resumes from its state_dict and checks every entry") {
  optim::SGD opt({param(), param()}, {.lr = 1.0});
  optim::ReduceLROnPlateau first(opt, {.patience = 1, .cooldown = 2});
  for (double metric : {3.0, 3.5, 3.5, 3.5}) first.step(metric);
  const StateDict saved = first.state_dict();

  optim::SGD resumed_opt({param(), param()}, {.lr = 1.0});
  optim::ReduceLROnPlateau resumed(resumed_opt, {.patience = 1, .cooldown = 2});
  resumed.load_state_dict(saved);
  CHECK(resumed.last_step() == 4);
  CHECK(resumed.best() == 3.0);
  CHECK(resumed.cooldown_left() == first.cooldown_left());
  CHECK(*resumed_opt.param_groups()[0].lr == doctest::Approx(0.1));
  for (double metric : {3.5, 3.5, 3.5, 2.0, 2.5}) {
    first.step(metric);
    resumed.step(metric);
    CHECK(*resumed_opt.param_groups()[0].lr == *opt.param_groups()[0].lr);
    CHECK(resumed.bad_steps() == first.bad_steps());
  }

  StateDict missing = saved;
  missing.erase(std::remove_if(missing.begin(), missing.end(), [](const auto& e) { return e.first == "best"; }),
                missing.end());
  CHECK_THROWS_WITH_FRAGMENT(resumed.load_state_dict(missing), ValueError,
                             "[ReduceLROnPlateau load_state_dict] the state needs last_step");
  StateDict negative = saved;
  for (auto& [name, value] : negative) {
    if (name == "lrs") value = tensor({-1.0}, {1}, {.dtype = DType::Float64});
  }
  CHECK_THROWS_WITH_FRAGMENT(resumed.load_state_dict(negative), ValueError,
                             "[ReduceLROnPlateau load_state_dict] lrs holds -1");
  CHECK_THROWS_WITH_FRAGMENT(optim::ReduceLROnPlateau(opt, {.factor = 1.0}), ValueError,
                             "[ReduceLROnPlateau] factor must be in [0, 1), got 1");
  CHECK_THROWS_WITH_FRAGMENT(optim::ReduceLROnPlateau(opt, {.patience = -1}), ValueError,
                             "patience and cooldown must be >= 0, got -1 and 0");
}

TEST_CASE("A schedule resumed from its state_dict sets the lrs an uninterrupted one would") {
  optim::SGD straight_opt({param()}, {.lr = 1.0, .momentum = 0.9});
  optim::OneCycleLR straight(straight_opt, {.max_lr = 0.5, .total_steps = 20});
  for (int s = 0; s < 12; ++s) straight.step();

  optim::SGD first_opt({param()}, {.lr = 1.0, .momentum = 0.9});
  optim::OneCycleLR first(first_opt, {.max_lr = 0.5, .total_steps = 20});
  for (int s = 0; s < 5; ++s) first.step();
  const StateDict saved_opt = first_opt.state_dict();
  const StateDict saved = first.state_dict();

  optim::SGD resumed_opt({param()}, {.lr = 1.0, .momentum = 0.9});
  optim::OneCycleLR resumed(resumed_opt, {.max_lr = 0.5, .total_steps = 20});
  resumed_opt.load_state_dict(saved_opt);
  resumed.load_state_dict(saved);
  CHECK(resumed.last_step() == 5);
  CHECK(*resumed_opt.param_groups()[0].lr == *first_opt.param_groups()[0].lr);
  for (int s = 5; s < 12; ++s) resumed.step();
  CHECK(*resumed_opt.param_groups()[0].lr == *straight_opt.param_groups()[0].lr);
  CHECK(*resumed_opt.param_groups()[0].momentum == *straight_opt.param_groups()[0].momentum);

  optim::StepLR step_lr(resumed_opt, 2);
  CHECK_THROWS_WITH_FRAGMENT(step_lr.load_state_dict({{"step", zeros({})}}), ValueError,
                             "[StepLR load_state_dict] unexpected entry 'step'");
  // Every number is checked before it is used or converted: 1e30 was cast to int64.
  const Tensor base_lrs = tensor({1.0}, {1}, {.dtype = DType::Float64});
  CHECK_THROWS_WITH_FRAGMENT(
      step_lr.load_state_dict({{"last_step", full({}, 1e30, {.dtype = DType::Float64})},
                               {"base_lrs", base_lrs}}),
      ValueError, "[StepLR load_state_dict] last_step holds 1e+30; expected a whole number");
  CHECK_THROWS_WITH_FRAGMENT(
      step_lr.load_state_dict({{"last_step", full({}, 3, {.dtype = DType::Int64})},
                               {"base_lrs", tensor({std::nan("")}, {1}, {.dtype = DType::Float64})}}),
      ValueError, "[StepLR load_state_dict] base_lrs holds nan; a learning rate is a finite number");
  CHECK(step_lr.last_step() == 0);
}

TEST_CASE("A schedule saved in a training checkpoint resumes the same lr curve") {
  auto make = [](optim::SGD& opt) {
    return optim::CosineAnnealingLR(opt, {.total_steps = 30, .warmup_steps = 4, .min_lr = 0.01});
  };
  optim::SGD straight_opt({param()}, {.lr = 0.4, .momentum = 0.9});
  optim::CosineAnnealingLR straight = make(straight_opt);
  const std::vector<double> curve = lrs(straight, straight_opt, 30);

  optim::SGD first_opt({param()}, {.lr = 0.4, .momentum = 0.9});
  optim::CosineAnnealingLR first = make(first_opt);
  for (int s = 0; s < 11; ++s) first.step();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      (std::filesystem::path(tmp != nullptr ? tmp : "/tmp") / "schedule_resume.ckpt").string();
  save_checkpoint(path, {.optimizer = first_opt.state_dict(),
                         .scheduler = first.state_dict(),
                         .step = first.last_step()});

  // A new run: the optimizer built with another lr, as a resumed trainer does before loading.
  optim::SGD resumed_opt({param()}, {.lr = 0.05, .momentum = 0.9});
  optim::CosineAnnealingLR resumed = make(resumed_opt);
  const TrainingCheckpoint checkpoint = load_checkpoint(path);
  REQUIRE_FALSE(checkpoint.scheduler.empty());
  resumed_opt.load_state_dict(checkpoint.optimizer);
  resumed.load_state_dict(checkpoint.scheduler);
  CHECK(resumed.last_step() == 11);
  std::vector<double> tail = lrs(resumed, resumed_opt, 19);
  const std::vector<double> expected(curve.begin() + 11, curve.end());
  REQUIRE(tail.size() == expected.size());
  for (size_t s = 0; s < tail.size(); ++s) {
    INFO("step " << s + 11);
    CHECK(tail[s] == expected[s]);  // bit for bit: every lr is a closed form of the step
  }
  std::filesystem::remove(path);
}

TEST_CASE("Schedules reject bad arguments with messages that show the values") {
  optim::SGD opt({param()});
  CHECK_THROWS_WITH_FRAGMENT(optim::StepLR(opt, 0), ValueError, "step_size must be > 0, got 0");
  CHECK_THROWS_WITH_FRAGMENT(optim::CosineAnnealingLR(opt, {.total_steps = 5, .warmup_steps = 5}),
                             ValueError, "got warmup_steps 5 and total_steps 5");
  CHECK_THROWS_WITH_FRAGMENT(optim::OneCycleLR(opt, {.max_lr = 1.0}), ValueError,
                             "total_steps must be > 0, got 0");
  CHECK_THROWS_WITH_FRAGMENT(optim::OneCycleLR(opt, {.max_lr = 1.0, .total_steps = 5, .pct_start = 1.5}),
                             ValueError, "pct_start must be in [0, 1], got 1.5");
}

}  // namespace
}  // namespace loom
