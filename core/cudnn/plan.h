// File: core/cudnn/plan.h
// Choosing and running an execution plan for a Graph:
//   heuristics mode A, then FALLBACK -> drop configs the numerics policy forbids
//   -> finalize -> set aside those whose workspace exceeds the limit
//   (plan_memory.h) -> test-execute once -> first that works wins (or, with
//   autotune, the fastest of the first few that work; under strict fp32, for a
//   conv or matmul graph, the fastest of all that work); the set-aside ones
//   only when none other works, the first of them that works.
// Test runs bind scratch buffers (one for all tensors where the run only checks
// that the plan executes, one per tensor where it is timed), or, for a build on
// the calling thread, the op's own tensors (SelectOptions::operands).
// Finalize success does not imply execute success in cuDNN 9.19, hence the test run.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/capture_gate.h"
#include "core/cudnn/graph.h"
#include "core/cudnn/variant_pointers.h"
#include "core/numerics.h"

namespace loom::cudnn {

struct PlanNotes {
  int64_t engine_id = -1;
  std::vector<std::string> numerical;  // "TENSOR_CORE", "NONDETERMINISTIC", ...
  std::vector<std::string> behavior;   // "RUNTIME_COMPILATION", ...
  std::vector<std::string> knobs;      // the config's knob choices, "TILE_SIZE=3", ...
  bool dynamic_shape = false;  // built from a dynamic-shape graph (kernel_reuse.h)
  bool kernel_reused = false;  // its kernel was compiled for another size of the graph
  // Chosen by a timed selection (selection_is_timed). A build that would time
  // does not restore an untimed plan file: an eager-mode file holds the
  // heuristics' first engine, which lazy mode's timing may beat.
  bool timed = false;
};

class Plan {
 public:
  Plan(std::shared_ptr<const BuiltGraph> graph, Descriptor plan, PlanNotes notes, int64_t workspace_bytes);

  // Runs on `stream` through `handle`; `workspace` must hold workspace_bytes().
  void execute(cudnnHandle_t handle, const VariantPointers& pointers, void* workspace) const;
  cudnnStatus_t try_execute(cudnnHandle_t handle, const VariantPointers& pointers,
                            void* workspace) const;

  // cuDNN's serialization of the plan (its JSON representation), which
  // restore_plan() turns back into a plan on the same GPU and cuDNN version.
  std::string json() const;

  const Graph& graph() const { return graph_->graph(); }
  const PlanNotes& notes() const { return notes_; }
  int64_t workspace_bytes() const { return workspace_bytes_; }

 private:
  std::shared_ptr<const BuiltGraph> graph_;  // the plan refers to its descriptors
  Descriptor plan_;
  PlanNotes notes_;
  int64_t workspace_bytes_;
};

// The policy filter (plan.cc, allowed()) reads everything else from the graph
// itself: which nodes it has (strict fp32 forbids TENSOR_CORE engines only in
// graphs with a conv or matmul node) and whether its data are 16-bit.
struct SelectOptions {
  NumericsPolicy policy;
  int autotune_candidates = 8;
  // Pass over engines that compile at run time (RUNTIME_COMPILATION): the
  // precompiled plan-build mode, and lazy mode's plan for the first run.
  bool precompiled_only = false;
  // Background builds: test runs (scratch memory, execution, synchronisation)
  // hold this shared, so none overlaps a CUDA-graph capture on another thread.
  CaptureGate* gate = nullptr;
  // Take the first working config, untimed even where the policy times every
  // candidate (lazy mode's stand-in; the timed choice is built in the background).
  bool first_working = false;
  // Time the candidates as autotune does, whatever the policy says: lazy
  // mode's builds of the best plan, in the background or on the calling
  // thread (lazy_mode_times).
  bool timed = false;
  // A finalized KERNEL_CACHE descriptor every candidate plan is finalized
  // with: for a dynamic-shape graph (Graph::set_dynamic_shape), a kernel it
  // holds for the same engine config is bound instead of compiled, and the
  // plan's notes say so (kernel_reuse.h).
  const Descriptor* kernel_cache = nullptr;
  // The op's own pointers, for a build on the calling thread right before the
  // op runs (no gate): test runs bind them instead of scratch copies, except
  // tensors sharing bytes with another (plan_memory.h), so selection allocates
  // little beyond a candidate's workspace. The op's outputs then hold a test
  // run's result until its real run writes them again.
  const VariantPointers* operands = nullptr;
};

// Whether lazy mode's builds of the best plan time their candidates under
// `policy`: in the background, where the timing costs the step nothing, and on
// the training thread for a key with neither a stand-in nor a tier below. The
// heuristics' first engine was often slower than the fastest (one H200, bf16,
// batch 128: timing made resnet20's step 27% faster, unet's 17%). The eager
// and precompiled modes time only under autotune: timing there multiplies the
// first step's runtime compilations (up to 8 candidates a key; the GPU test
// suite, run in eager mode, took 2.7x as long). A deterministic policy keeps
// the heuristics' order, so two runs pick the same engines.
inline bool lazy_mode_times(const NumericsPolicy& policy) { return !policy.deterministic; }

// Whether select_plan times candidates for `graph` under `options` (autotune,
// a background build, or strict fp32 on a conv or matmul graph) rather than
// taking the first that works.
bool selection_is_timed(const Graph& graph, const SelectOptions& options);

struct Selection {
  std::unique_ptr<Plan> plan;  // null when no engine config works
  int candidates_seen = 0;     // configs the heuristics returned
  int candidates_tried = 0;    // configs that passed the policy filter
  int candidates_timed = 0;    // working configs timed (0: the first working one was taken)
  // With precompiled_only: runtime-compiled configs passed over before the
  // chosen one. 0 (without autotune) means the plan is the one an unrestricted
  // selection would choose too.
  int runtime_compiled_skipped = 0;
  std::string why_none;        // when plan is null: what failed, for the error/explain text
};

// True when cuDNN compiles the engine's kernel at run time (NVRTC, 0.1-0.7 s).
bool compiles_at_run_time(const PlanNotes& notes);

// Builds `graph`'s descriptors and selects a plan for it on the current stream.
Selection select_plan(const Graph& graph, cudnnHandle_t handle, const SelectOptions& options);

// Where one restore_plan() call spent its time, for the plan timeline: the
// step-by-step numbers say which part a faster restore has to cut.
struct RestoreTimes {
  double graph_ms = 0;     // the graph's backend descriptors (BuiltGraph)
  double finalize_ms = 0;  // the execution plan finalized from its JSON
  double buffers_ms = 0;   // the test run's scratch buffers: allocation and zeroing
  double test_ms = 0;      // the test run and the synchronisation that waits for it
};

// The plan saved as `json` for `graph`, finalized and test-executed without
// heuristics or runtime compilation; null when the policy in `options` forbids
// its engine, its workspace is over the limit select_plan prefers (plan_memory.h:
// selecting again replaces the file), cuDNN refuses it (another version, another
// GPU) or the test run fails.
// `options.gate`, when set (a background restore), is held around the test run's
// buffers and execution, as in select_plan. `times`, when given, receives the breakdown.
std::unique_ptr<Plan> restore_plan(const Graph& graph, cudnnHandle_t handle, const std::string& json,
                                   PlanNotes notes, const SelectOptions& options,
                                   RestoreTimes* times = nullptr);

// Every engine config the heuristics (A then FALLBACK) return for `graph` that
// finalizes and executes, ignoring the policy: for tests that check each engine.
std::vector<std::unique_ptr<Plan>> all_working_plans(Graph graph, cudnnHandle_t handle);

}  // namespace loom::cudnn
