// File: core/cudnn/plan_cache.h
// Graph -> cached plan, keyed by the graph's canonical form, the numerics
// policy and the device (plan_key.h). Three parts: an LRU of entries (lru.h),
// a PlanBuilder that makes a miss's plan under the plan-build mode, on the
// calling thread or on background builders (plan_builder.h), and a PlanLog of
// counters and the timeline (plan_log.h). The cache joins them: it looks keys
// up, turns a miss into a PlanRequest, stores what the builder made (an
// unsupported graph too, so it is never probed twice), and swaps in what the
// background finished at a step boundary (apply_pending(), never inside a
// capture; generation() counts the swaps, so a captured step re-captures).
// docs/gpu_and_precision.md tells the user's side of the build modes.
//
//   Graph g = ...;  // the op's graph, described on every call (cheap: no cuDNN calls)
//   if (!run_plan(g, {{kX, x.data}, {kY, y.data}}, "Loom CUDA kernels")) run_the_tier_below();
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/cudnn/lru.h"
#include "core/cudnn/plan.h"
#include "core/cudnn/plan_builder.h"
#include "core/cudnn/plan_key.h"
#include "core/cudnn/plan_log.h"
#include "core/numerics.h"

namespace loom::cudnn {

class PlanCache {
 public:
  static PlanCache& global();

  // The plan for `key`, made from `graph` on a miss under the key's policy and
  // the plan-build mode. Null when no engine supports it, or (lazy mode, with
  // `has_fallback`) while the best plan is built in the background and the op
  // runs on its tier below cuDNN, or (with `has_fallback`, inside a
  // VariantWalk) when a better variant of the op is pending: then a miss is
  // deferred, neither built nor cached (variant_walk.h). A hit reads nothing
  // else; a miss reads the calling thread's state once into a PlanRequest
  // (plan_key.h), which everything below takes. `operands`, when given, are the
  // pointers the op runs the plan with right after: a build on the calling
  // thread tests its candidates on them (plan.h, SelectOptions::operands).
  std::shared_ptr<const Plan> get(const PlanKey& key, const Graph& graph, bool has_fallback = false,
                                  const VariantPointers* operands = nullptr);

  // Whether `key` waits for its background build with nothing to run meanwhile.
  bool pending_without_plan(const PlanKey& key) const;

  // Swaps in the plans background builds finished; returns how many keys
  // changed plan. Call at a step boundary: does nothing while the calling
  // thread's stream is capturing.
  int apply_pending();
  // Incremented by every apply_pending() that changed a plan or ended a pending
  // key without one (an op whose variant walk deferred to that key can then go on).
  uint64_t generation() const { return generation_.load(); }
  // Blocks until no background build is queued or running (tests, warm-up).
  void wait_for_background_builds();
  // Background builds queued or running.
  size_t background_outstanding() const;
  // Whether background builds finished since the last apply_pending().
  bool swaps_waiting() const { return builder_.any_finished(); }
  // Adds the cuDNN warm-up (context.h's warm_up, run on a builder) to the timeline.
  void record_warm_up(double ms);
  // The timeline, oldest first, and as a table.
  std::vector<PlanEvent> timeline() const;
  std::string timeline_table() const;

  // Why `key` has no plan ("" when it has one or was never built).
  std::string why_unsupported(const PlanKey& key) const;
  // Records that `key`, which has no plan, ran on `tier` (a Loom CUDA kernel,
  // cuDNN's legacy API): explain() shows it, stats() counts the runs.
  void record_fallback(const PlanKey& key, std::string_view tier);

  PlanCacheStats stats() const;
  std::vector<PlanInfo> entries() const;  // most recently used first
  // A table of entries() plus the counters; one line when there are no entries
  // (no usable GPU, or nothing ran through cuDNN).
  std::string explain() const;
  void set_capacity(size_t capacity);     // LOOM_CUDNN_PLAN_CACHE_LIMIT sets the initial one
  void clear();  // also forgets the timeline; builds still running are ignored when they end

 private:
  PlanCache();
  struct Entry {
    std::shared_ptr<const Plan> plan;
    PlanInfo info;
    uint64_t ticket = 0;  // the outstanding background build (0: none)
  };
  // Why a key waits for a builder.
  enum class Pending { Build, Restore };
  // A lookup that missed, under the request read at get()'s entry.
  std::shared_ptr<const Plan> miss(const PlanRequest& request);
  // Stores the plan the builder made on the calling thread (or none) and
  // queues its background build when it has one.
  std::shared_ptr<const Plan> store(const PlanRequest& request, PlanBuilder::Made made, double ms);
  // A key met during a capture, or (lazy mode) with a plan file:
  // runs on the tier below until its background build or restore is swapped
  // in. Returns null, the plan to run now.
  std::shared_ptr<const Plan> add_pending(const PlanKey& key, const Graph& graph, double ms,
                                          Pending why = Pending::Build);
  // What a finished background result did to its entry: nothing, a new plan, or
  // the end of a pending key that has no plan (now unsupported).
  enum class Swap { None, Plan, Ended };
  Swap swap_in(Entry& entry, PlanBuilder::Finished& done);
  void evict_over_capacity();

  mutable std::mutex mutex_;  // guards lru_; held by a synchronous build
  Lru<PlanKey, Entry, PlanKeyHash> lru_;
  PlanLog log_;
  PlanBuilder builder_{log_};
  std::atomic<uint64_t> generation_ = 0;
};

// PlanCache::global().apply_pending(): the step-boundary hook for training
// loops that do not go through optim::TrainStep. Cheap when nothing finished.
int apply_pending_plans();

// The one way ops run a graph: looks its plan up (building it on a miss, with
// test runs on `pointers`) and executes it with `pointers` and a workspace
// taken for this run (context.h's Workspace). Returns false when no
// engine supports the graph (or, lazy, none does yet); when `fallback_tier` is
// not empty the key is then recorded as running there
// (PlanCache::record_fallback), and the caller runs it. A graph with a tensor
// less than 16-byte aligned (fully_aligned, tensor_spec.h) is never looked up:
// false, and the caller's tier below runs it.
bool run_plan(const Graph& graph, const VariantPointers& pointers, std::string_view fallback_tier);

// What run_plan did, for a caller that acts on why no plan ran (fused.cc's
// masked batch norm + ReLU queues its backward while its forward is pending).
// Pending: the best plan is built in the background and nothing runs
// meanwhile (lazy mode); NoPlan: unsupported, or deferred by a VariantWalk.
enum class PlanRun { Ran, Pending, NoPlan };
PlanRun run_plan_reporting(const Graph& graph, const VariantPointers& pointers,
                           std::string_view fallback_tier);

}  // namespace loom::cudnn
