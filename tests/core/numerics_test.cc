// File: tests/core/numerics_test.cc
// The plan-build mode: names round-trip, unknown text is refused, the setter
// is seen by other threads (background plan builders read it).
#include "core/numerics.h"

#include <doctest/doctest.h>

#include <thread>

namespace loom {
namespace {

TEST_CASE("plan-build mode names round-trip") {
  for (PlanBuildMode mode : {PlanBuildMode::Lazy, PlanBuildMode::Eager, PlanBuildMode::Precompiled}) {
    std::optional<PlanBuildMode> parsed = parse_plan_build_mode(plan_build_mode_name(mode));
    REQUIRE(parsed.has_value());
    CHECK(*parsed == mode);
  }
  CHECK(plan_build_mode_name(PlanBuildMode::Lazy) == "lazy");
  CHECK(plan_build_mode_name(PlanBuildMode::Eager) == "eager");
  CHECK(plan_build_mode_name(PlanBuildMode::Precompiled) == "precompiled");
}

TEST_CASE("unknown plan-build modes are refused") {
  CHECK_FALSE(parse_plan_build_mode("").has_value());
  CHECK_FALSE(parse_plan_build_mode("Lazy").has_value());
  CHECK_FALSE(parse_plan_build_mode("eager ").has_value());
  CHECK_FALSE(parse_plan_build_mode("precompile").has_value());
}

TEST_CASE("the plan-build mode is process-wide") {
  const PlanBuildMode before = plan_build_mode();
  set_plan_build_mode(PlanBuildMode::Precompiled);
  PlanBuildMode seen = PlanBuildMode::Lazy;
  std::thread([&] { seen = plan_build_mode(); }).join();
  CHECK(seen == PlanBuildMode::Precompiled);
  set_plan_build_mode(PlanBuildMode::Eager);
  CHECK(plan_build_mode() == PlanBuildMode::Eager);
  set_plan_build_mode(before);
}

TEST_CASE("PlanBuildGuard restores the previous mode") {
  const PlanBuildMode before = plan_build_mode();
  {
    PlanBuildGuard precompiled(PlanBuildMode::Precompiled);
    CHECK(plan_build_mode() == PlanBuildMode::Precompiled);
    {
      PlanBuildGuard eager(PlanBuildMode::Eager);
      CHECK(plan_build_mode() == PlanBuildMode::Eager);
    }
    CHECK(plan_build_mode() == PlanBuildMode::Precompiled);
  }
  CHECK(plan_build_mode() == before);
}

}  // namespace
}  // namespace loom
