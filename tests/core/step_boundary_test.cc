// File: tests/core/step_boundary_test.cc
// The step-boundary hook without a GPU: a registered backend's functions are
// what step_boundary(), plan_summary(), plan_report() and the others return.
#include "core/step_boundary.h"

#include <doctest/doctest.h>

namespace loom {
namespace {

int runs = 0;
int waits = 0;

TEST_CASE("the registered hook answers every call") {
  set_step_boundary_hook(StepBoundaryHook{
      .run = [] { return static_cast<uint64_t>(++runs * 10); },
      .wait_for_background = [] { return ++waits == 1; },
      .summary = [] { return PlanSummary{.hits = 3, .misses = 2, .build_seconds = 0.5}; },
      .explain = [] { return std::string("the plan table\n"); },
      .timeline_table = [] { return std::string("the timeline\n"); },
      .engine_of = [](const std::string& graph) { return graph == "conv" ? std::string("engine 7") : std::string(); }});
  CHECK(step_boundary() == 10);
  CHECK(step_boundary() == 20);
  CHECK(wait_for_background_plans());
  CHECK_FALSE(wait_for_background_plans());
  const PlanSummary s = plan_summary();
  CHECK(s.hits == 3);
  CHECK(s.misses == 2);
  CHECK(s.plans_built == 0);
  CHECK(s.build_seconds == 0.5);
  CHECK(plan_report() == "the plan table\n");
  CHECK(plan_timeline_table() == "the timeline\n");
  CHECK(plan_engine("conv") == "engine 7");
  CHECK(plan_engine("matmul") == "");
}

}  // namespace
}  // namespace loom
