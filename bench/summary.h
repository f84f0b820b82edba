// File: bench/summary.h
// What one benchmark configuration measured, the median of its repeats, and
// the JSON line both bench/train_step and bench/torch_bench.py write per
// configuration (bench/compare.py reads them):
//
//   {"framework": "loom", "kind": "step", "model": "lenet5", "batch": 128,
//    "precision": "tf32", "mode": "graph", "layout": "nchw", "device": "cuda",
//    "steps": 100, "repeats": 5, "warmup": 10, "ms_per_step": 0.21,
//    "img_per_s": 609523.8, "first_step_s": 1.9, "peak_bytes": 1.2e7,
//    "peak_mib": 11.4, "steady_peak_bytes": 1.1e7, "steady_peak_mib": 10.5,
//    "repeat_ms": [...], "fallback_reason": ""}
//   {"framework": "loom", "kind": "tta", "target": 0.91, "reached": true,
//    "epochs": 4, "seconds": 5.1, "wall_seconds": 5.3, "accuracy": 0.912,
//    "accuracies": [...]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::bench {

// The middle value (the mean of the two middle ones for an even count).
// Throws ValueError for an empty list.
double median(std::vector<double> values);

struct StepResult {
  std::string model, precision, mode, layout, device;
  int64_t batch = 0;
  int steps = 0, repeats = 0, warmup = 0;
  std::vector<double> repeat_ms = {};  // ms per step of each repeat
  // To the end of step 1, synchronised, from model construction; for the first
  // configuration of a process from its start (CUDA and cuDNN initialisation included).
  double first_step_s = 0;
  // Where the first step's time went, from the same start: the model built and
  // on its device (CUDA context included), then the input batches made.
  double model_ready_s = 0, inputs_ready_s = 0;
  int64_t peak_bytes = 0;              // peak GPU memory allocated (0 on the CPU)
  std::string peak_breakdown = {};     // the peak by purpose, one line ("" on the CPU)
  // The timed steps' own peak of memory held from the driver (live and cached
  // blocks, so a replayed CUDA graph's pool counts), from an emptied cache after
  // the first steps' plan builds, races and tracing (torch_bench.py's alike).
  int64_t steady_peak_bytes = 0;
  std::string steady_breakdown = {};   // the timed steps' peak by purpose, as peak_breakdown
  std::string pools = {};              // each pool's reserved and allocated bytes after the timed steps
  std::string fallback_reason = {};    // why graph mode ran eagerly ("" when it replayed)
  // Graph modes: the step's captures, those into a planned arena, and those of
  // them whose plan missed requests (optim/train_step.h).
  int64_t captures = 0, planned_captures = 0, missed_plans = 0;
  // False when lazily built plans still landed after the settle rounds
  // (bench/stopwatch.h), so a swap and its capture may fall among the timed steps.
  bool plans_settled = true;
  std::string plan_build = "lazy";     // the cuDNN plan-build mode (core/numerics.h)
  // cuDNN plans this configuration built before its first run, restored from the
  // plan files, started lazily on a stand-in, and specialized (swapped) later.
  int64_t plans_built = 0, plans_restored = 0, plans_lazy = 0, plans_specialized = 0;
  // Data parallel (--distributed): ranks stepping together, each with `batch`
  // images, and one eager step's communication (ms after the forward returned).
  int ranks = 1;
  double backward_ms = 0, allreduce_done_ms = 0;
  std::vector<double> bucket_start_ms = {}, bucket_end_ms = {};

  double ms_per_step() const { return median(repeat_ms); }
  double images_per_second() const {
    return static_cast<double>(batch) * ranks * 1e3 / ms_per_step();
  }
};

struct TtaResult {
  double target = 0;
  bool reached = false;
  int epochs = 0;                       // epochs run (the one that reached the target last)
  double seconds = 0;                   // the trainer's own clock at the end of that epoch
  double wall_seconds = 0;              // the whole train() call, timed from outside
  std::vector<double> accuracies = {};  // test accuracy after each epoch
};

std::string to_json(const StepResult& result);
std::string to_json(const TtaResult& result);

}  // namespace loom::bench
