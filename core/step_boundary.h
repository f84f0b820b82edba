// File: core/step_boundary.h
// The runtime hook between training steps, named by no backend: a backend
// that prepares work in the background (the cuDNN plan cache, whose builders
// make better plans while steps run) registers what it does at a step
// boundary and what it reports; training loops, the optimizer, the profiler,
// the benchmark and the examples call these functions and include no backend
// header. Without a registered backend (a build without CUDA, or a program
// that ran no op through cuDNN) they do nothing and report nothing.
//
//   optimizer.step();
//   if (step_boundary() != captured_generation) recapture();
#pragma once

#include <cstdint>
#include <string>

namespace loom {

// The backend's plan counters, for the progress lines and the profiler.
struct PlanSummary {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t plans_built = 0;
  int64_t plans_restored = 0;       // from the plan files
  int64_t background_restores = 0;  // of plans_restored: restored by a builder
  int64_t lazy_plans = 0;           // keys first run on a stand-in or the tier below
  int64_t plans_specialized = 0;    // background plans swapped in later
  int64_t kernels_reused = 0;       // dynamic-shape plans that bound another size's kernel
  int64_t unsupported = 0;
  int64_t evictions = 0;
  double build_seconds = 0;  // on the calling threads
};

// What a backend registers (every function set).
struct StepBoundaryHook {
  // Swaps in what the background finished (not while the calling thread's
  // stream is capturing); returns the generation, which changes whenever a
  // swap changed what a captured step would run.
  uint64_t (*run)();
  // Blocks until the background work is done; returns whether results wait for the next boundary.
  bool (*wait_for_background)();
  PlanSummary (*summary)();
  std::string (*explain)();         // the plan table
  std::string (*timeline_table)();  // when each plan was built, restored or swapped ("" when none)
  // The engine of the plan built for a graph pattern (the cuDNN graph's
  // pattern() string, as fusion::report names it); "" when none was built.
  std::string (*engine_of)(const std::string& graph);
};

// Registers the backend's hook (one backend: a second registration replaces the first).
void set_step_boundary_hook(const StepBoundaryHook& hook);

// A step boundary: the registered backend's run(); 0 without one.
uint64_t step_boundary();
// The backend's wait_for_background(); false without one.
bool wait_for_background_plans();
// The backend's counters; zeros without one.
PlanSummary plan_summary();
// The backend's plan table; without one, a line saying that no backend built plans.
std::string plan_report();
// The backend's plan timeline; "" without one.
std::string plan_timeline_table();
// The backend's engine for a graph pattern ("engine 7, knobs ..., notes ..., workspace N B");
// "" without one, or when no plan was built for that pattern.
std::string plan_engine(const std::string& graph);

}  // namespace loom
