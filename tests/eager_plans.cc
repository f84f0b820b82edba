// File: tests/eager_plans.cc
// Tests that check cuDNN's engines call by call (tests/core/cudnn, tests/core/ops:
// this graph ran on cuDNN, its plan was built and saved, it matches the CPU), or
// that count allocations and replays (tests/core/cuda, tests/optim), run in the
// eager plan-build mode: every call runs the best plan for its key, and no
// background build allocates or swaps a plan mid-test. In lazy mode (the default)
// a first call runs a stand-in engine or the tier below cuDNN until a
// background build is swapped in at a step boundary;
// tests/core/cudnn/plan_lazy_gpu_test.cc tests that mode, and the layer and
// trainer tests run in it. A LOOM_CUDNN_PLAN_BUILD set by whoever runs the
// tests wins.
#include <cstdlib>

#include "core/numerics.h"

namespace {

bool use_eager_plans() {
  if (std::getenv("LOOM_CUDNN_PLAN_BUILD") == nullptr) {
    loom::set_plan_build_mode(loom::PlanBuildMode::Eager);
  }
  return true;
}

const bool kEagerPlans = use_eager_plans();

}  // namespace
