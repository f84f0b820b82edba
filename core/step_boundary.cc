// File: core/step_boundary.cc
// The registered backend's step-boundary hook (step_boundary.h).
#include "core/step_boundary.h"

#include <atomic>

namespace loom {

namespace {

// Set once, by a backend's static initialisation, before any step runs; read
// by every step. A pointer to a leaked copy keeps reads lock-free.
std::atomic<const StepBoundaryHook*>& hook() {
  static std::atomic<const StepBoundaryHook*> registered = nullptr;
  return registered;
}

}  // namespace

void set_step_boundary_hook(const StepBoundaryHook& h) { hook() = new StepBoundaryHook(h); }

uint64_t step_boundary() {
  const StepBoundaryHook* h = hook().load();
  return h == nullptr ? 0 : h->run();
}

bool wait_for_background_plans() {
  const StepBoundaryHook* h = hook().load();
  return h != nullptr && h->wait_for_background();
}

PlanSummary plan_summary() {
  const StepBoundaryHook* h = hook().load();
  return h == nullptr ? PlanSummary{} : h->summary();
}

std::string plan_report() {
  const StepBoundaryHook* h = hook().load();
  return h == nullptr ? "no cuDNN plans: this build has no CUDA backend, or no op ran through cuDNN\n" : h->explain();
}

std::string plan_timeline_table() {
  const StepBoundaryHook* h = hook().load();
  return h == nullptr ? "" : h->timeline_table();
}

std::string plan_engine(const std::string& graph) {
  const StepBoundaryHook* h = hook().load();
  return h == nullptr ? "" : h->engine_of(graph);
}

}  // namespace loom
