// File: tests/optim/train_step_lazy_gpu_test.cc
// TrainStep under lazy plan building: the first steps run on stand-in plans
// (captured as such), and when background builds finish, the next step swaps
// the new plans in, drops the captured graph, runs one eager step and captures
// again; the losses stay within TF32 tolerance of an eager-mode run. A loop
// that does not use TrainStep gets the finished plans at Optimizer::step().
//
// B batch; inputs x (B, 1, 28, 28) channels-last, labels y (B).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/cudnn/plan_cache.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "optim/train_step.h"
#include "tests/testing.h"

using namespace loom;

namespace {

struct Run {
  nn::Sequential net;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::TrainStep> step;
  Tensor x, y;

  Run() {
    manual_seed(9);
    net = nn::mnist_net();
    net.to(testing::test_gpu());
    net.to(MemoryFormat::ChannelsLast);
    opt = std::make_unique<optim::SGD>(net.parameters(), optim::SgdOptions{.lr = 0.01});
    step = std::make_unique<optim::TrainStep>(
        [this](const Tensor& xs, const Tensor& ys) { return std::vector<Tensor>{cross_entropy(net(xs), ys)}; },
        // The swap mechanics step by step: a traced step adds one eager step
        // before its capture (train_step_gpu_test counts those).
        *opt, optim::TrainStepOptions{.trace_fusion = false});
    Generator gen(10);
    x = randn({32, 1, 28, 28}, {}, &gen).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
    y = randint(0, 10, {32}, {.dtype = DType::Int64}, &gen).to(testing::test_gpu());
  }

  double loss() { return (*step)(x, y)[0].item(); }
};

// Lazy plan building from an empty cache, plans built rather than restored, under tf32.
struct LazyPlans {
  LazyPlans() {
    setenv("LOOM_CUDNN_PLAN_DIR", "off", 1);
    plans.clear();
  }
  NumericsGuard tf32{{.precision = Precision::Tf32}};
  PlanBuildGuard lazy{PlanBuildMode::Lazy};
  cudnn::PlanCache& plans = cudnn::PlanCache::global();
};

}  // namespace

LOOM_GPU_TEST_CASE("a plan swap drops the captured step; it runs eagerly once, then is captured again") {
  setenv("LOOM_CUDNN_PLAN_DIR", "off", 1);  // builds, not restores
  NumericsGuard tf32({.precision = Precision::Tf32});
  auto& plans = cudnn::PlanCache::global();

  std::vector<double> reference;
  {
    plans.clear();
    PlanBuildGuard eager(PlanBuildMode::Eager);
    Run run;
    for (int i = 0; i < 12; ++i) reference.push_back(run.loss());  // as many as the lazy run below
  }

  plans.clear();
  PlanBuildGuard lazy(PlanBuildMode::Lazy);
  Run run;
  std::vector<double> losses;
  losses.push_back(run.loss());  // eager warm-up: the plans start lazily
  losses.push_back(run.loss());  // captured, with whatever plans are in by now
  REQUIRE(run.step->last_step_replayed());
  CHECK(plans.stats().lazy_plans > 0);
  const uint64_t captured_under = plans.generation();
  plans.wait_for_background_builds();

  losses.push_back(run.loss());  // swaps what finished since the capture
  if (plans.generation() > captured_under) {
    CHECK_FALSE(run.step->last_step_replayed());  // the graph was dropped: one eager step
    CHECK(run.step->stats().plan_swaps == 1);
    losses.push_back(run.loss());  // captured again
    CHECK(run.step->last_step_replayed());
    CHECK(run.step->stats().captures == 4);  // each capturing step: recorded, then planned
  } else {  // every background build finished before the capture: nothing to swap
    MESSAGE("all plans were specialized before the first capture; no re-capture to check");
    CHECK(run.step->last_step_replayed());
    CHECK(run.step->stats().plan_swaps == 0);
    losses.push_back(run.loss());
  }
  // A swap can bring new keys (cuDNN's max-pool forward, once swapped in, makes
  // the backward meet cuDNN's pooling backward; a swap also makes the kernel
  // races run again), which build and swap in turn: a few rounds settle every key.
  bool settled = false;
  for (int round = 0; round < 4 && !settled; ++round) {
    plans.wait_for_background_builds();
    const int64_t swaps = run.step->stats().plan_swaps;
    losses.push_back(run.loss());
    losses.push_back(run.loss());
    settled = run.step->stats().plan_swaps == swaps && plans.background_outstanding() == 0;
  }
  CHECK(settled);
  CHECK(run.step->last_step_replayed());
  // Every capture was made again into the arena planned from its requests,
  // which placed them all.
  CHECK(run.step->stats().planned_captures * 2 == run.step->stats().captures);
  CHECK(run.step->stats().missed_plans == 0);
  CHECK(plans.background_outstanding() == 0);
  MESSAGE(plans.timeline_table());

  REQUIRE(losses.size() <= reference.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isfinite(losses[i]));
    CHECK(losses[i] == doctest::Approx(reference[i]).epsilon(5e-3));
  }
}

LOOM_GPU_TEST_CASE("a plan swap before the first capture runs one more eager step, so races see the new plans") {
  LazyPlans lazy;
  cudnn::PlanCache& plans = lazy.plans;
  Run run;
  (void)run.loss();  // the warm-up step: eager, the plans start lazily
  REQUIRE(plans.stats().lazy_plans > 0);
  CHECK(run.step->stats().captures == 0);
  const uint64_t before = plans.generation();
  plans.wait_for_background_builds();
  (void)run.loss();  // would be the capture; it swaps first
  if (plans.generation() > before) {
    CHECK_FALSE(run.step->last_step_replayed());
    CHECK(run.step->stats().captures == 0);
    CHECK(run.step->stats().eager_steps == 2);
  } else {
    MESSAGE("every background build kept its stand-in's kernel: nothing swapped");
  }
  for (int round = 0; round < 4 && plans.background_outstanding() + plans.swaps_waiting() > 0; ++round) {
    plans.wait_for_background_builds();
    (void)run.loss();
  }
  (void)run.loss();
  (void)run.loss();
  CHECK(run.step->last_step_replayed());
  CHECK(run.step->stats().captures >= 1);
}

LOOM_GPU_TEST_CASE("a loop of its own (no TrainStep) gets the finished plans at Optimizer::step") {
  LazyPlans lazy;
  cudnn::PlanCache& plans = lazy.plans;
  Run run;
  auto step = [&] {
    run.opt->zero_grad();
    Tensor loss = cross_entropy(run.net(run.x), run.y);
    loss.backward();
    run.opt->step();
    return loss.item();
  };
  const uint64_t generation = plans.generation();
  const double first = step();
  // Batch norm has only runtime-compiled engines on the H100: its keys start on
  // the tier below and their background builds finish with a plan to swap in.
  REQUIRE(plans.stats().lazy_plans > 0);
  plans.wait_for_background_builds();
  const double second = step();
  CHECK(plans.generation() > generation);  // swapped at the end of an optimizer step
  CHECK(plans.stats().plans_specialized > 0);
  CHECK_FALSE(plans.swaps_waiting());
  CHECK(std::isfinite(first));
  CHECK(std::isfinite(second));
}
#endif  // LOOM_WITH_CUDA
