// File: core/numerics.cc
// The numerics policy and the plan build mode: the current values, guards, names.
#include "core/numerics.h"

#include <atomic>
#include <cstdlib>

#include "core/error.h"

namespace loom {

namespace {
thread_local NumericsPolicy current_policy;

PlanBuildMode mode_from_environment() {
  const char* text = std::getenv("LOOM_CUDNN_PLAN_BUILD");
  if (text == nullptr || *text == '\0') return PlanBuildMode::Lazy;
  std::optional<PlanBuildMode> mode = parse_plan_build_mode(text);
  LOOM_CHECK(mode.has_value(), ValueError,
             "[numerics] LOOM_CUDNN_PLAN_BUILD='{}' is not a plan-build mode; use lazy, eager or "
             "precompiled",
             text);
  return *mode;
}

std::atomic<PlanBuildMode>& build_mode() {
  static std::atomic<PlanBuildMode> mode{mode_from_environment()};
  return mode;
}
}  // namespace

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::StrictFp32: return "strict_fp32";
    case Precision::Tf32: return "tf32";
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
  }
  return "?";
}

const NumericsPolicy& numerics_policy() { return current_policy; }

NumericsGuard::NumericsGuard(const NumericsPolicy& policy) : previous_(current_policy) {
  current_policy = policy;
}
NumericsGuard::~NumericsGuard() { current_policy = previous_; }

std::string_view plan_build_mode_name(PlanBuildMode mode) {
  switch (mode) {
    case PlanBuildMode::Lazy: return "lazy";
    case PlanBuildMode::Eager: return "eager";
    case PlanBuildMode::Precompiled: return "precompiled";
  }
  return "?";
}

std::optional<PlanBuildMode> parse_plan_build_mode(std::string_view text) {
  for (PlanBuildMode mode : {PlanBuildMode::Lazy, PlanBuildMode::Eager, PlanBuildMode::Precompiled}) {
    if (text == plan_build_mode_name(mode)) return mode;
  }
  return std::nullopt;
}

PlanBuildMode plan_build_mode() { return build_mode().load(); }
void set_plan_build_mode(PlanBuildMode mode) { build_mode().store(mode); }

}  // namespace loom
