// File: core/cudnn/plan_cache.h
// Graph -> cached plan, keyed by the graph's canonical form (graph.h), the
// numerics policy and the device. A miss restores the plan from the plan files
// (plan_store.h) when an earlier process saved it, else selects a plan
// (plan.h), caches it and saves it; a graph no engine supports is cached as
// unsupported too, so it is never probed twice. LRU with a configurable
// capacity, guarded by a mutex.
//
// When a miss builds its plan follows plan_build_mode() (core/numerics.h):
// - eager: the best plan (heuristics order, policy filter, test run) now;
// - precompiled: the best plan among engines that need no runtime compilation;
// - lazy (the default): the first working engine that needs no runtime
//   compilation now, or, when there is none and the caller has a tier below
//   cuDNN (run_plan's callers all have), that tier (the key is "pending", not
//   unsupported), or else the best plan now. The best plan is then built on
//   background threads (BuildQueue, each with its own cuDNN handle and
//   stream) and swapped in by apply_pending(),
//   which callers run at a step boundary (optim::TrainStep does, before each
//   step), never inside a capture. generation() counts the swaps, so a
//   captured whole-step graph knows to re-capture. A deterministic policy
//   builds eagerly: one plan per key for the whole run. A new batch size of a
//   layer whose plan compiles at run time first gets a dynamic-shape plan that
//   reuses another size's kernel (kernel_reuse.h), then its own static plan,
//   one swap per step boundary. Plan files hold the
//   best plan, never a lazy stand-in, so a restored plan needs no swap. A key
//   whose plan file holds a runtime-compiled engine is restored the same way in
//   lazy mode: it runs on the tier below at once while a builder restores its
//   plan (several at once; a file that no longer restores is rebuilt there),
//   swapped in at the next step boundary. Such a restore costs 20-45 ms (mostly
//   cuDNN's finalize), and mnist_net's warm first step, restoring its 33 keys
//   one after another on the main thread, waited 0.35 s for them (H100). A
//   precompiled engine restores at once (a few ms, less than a first run on the
//   tier below), as does every key without a tier below, in a deterministic
//   policy, in the eager and precompiled modes, or with
//   LOOM_CUDNN_BACKGROUND_RESTORE=0. While
//   an op's preferred variant is pending, its lower variants are not built
//   (variant_walk.h); at exit, outstanding background builds are waited for
//   (at most 10 s) so that their plans reach the plan files.
//
//   Graph g = ...;  // the op's graph, described on every call (cheap: no cuDNN calls)
//   if (!run_plan(g, {{kX, x.data}, {kY, y.data}}, "Loom CUDA kernels")) run_the_tier_below();
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/cudnn/plan.h"
#include "core/numerics.h"

namespace loom::cudnn {

// What identifies a plan: the graph's canonical form, the policy, the device.
// The hash is computed once, when the key is made.
class PlanKey {
 public:
  PlanKey(const Graph& graph, const NumericsPolicy& policy, int device);

  bool operator==(const PlanKey& other) const;
  size_t hash() const { return hash_; }
  const NumericsPolicy& policy() const { return policy_; }
  int device() const { return device_; }
  const std::vector<int64_t>& values() const { return values_; }

 private:
  NumericsPolicy policy_;
  int device_;
  std::vector<int64_t> values_;
  size_t hash_;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const { return key.hash(); }
};

struct PlanInfo {
  std::string graph;  // Graph::pattern()
  bool supported = true;
  PlanNotes notes;
  int64_t workspace_bytes = 0;
  double build_ms = 0;
  bool restored = false;  // from the plan files (plan_store.h), not built
  bool restoring = false;    // lazy: a builder restores its plan from the plan files
  bool pending = false;      // lazy: a background build will replace this plan (or the tier below)
  bool specialized = false;  // lazy: the background build's plan was swapped in
  double background_ms = 0;  // lazy: how long the background build took
  int64_t hits = 0;
  int candidates_seen = 0;
  std::string why_unsupported;
  std::string fallback;  // the tier that runs an unsupported key ("" when none has)
};

struct PlanCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t plans_built = 0;     // before the key's first run (lazy stand-ins included)
  int64_t plans_restored = 0;  // read from the plan files instead of built (in use)
  int64_t restores_queued = 0;      // lazy: keys met with a plan file, restored by a builder
  int64_t background_restores = 0;  // of plans_restored: restored by a builder, then swapped in
  int64_t unsupported = 0;
  int64_t evictions = 0;
  int64_t fallback_runs = 0;  // runs of a key without an engine on the tier below cuDNN
  int64_t lazy_plans = 0;     // keys first run on a stand-in while their best plan was built
  int64_t stand_in_looks_skipped = 0;  // lazy keys whose structure had no precompiled stand-in
  int64_t plans_specialized = 0;  // background plans swapped in by apply_pending()
  int64_t background_builds = 0;  // background builds finished (swapped in or not)
  // Lookups of keys not in the cache that were neither built nor cached because
  // a better variant of the same op was pending (variant_walk.h); not misses.
  int64_t variants_deferred = 0;
  int64_t prefetched = 0;  // keys queued by prefetch() before an op met them
  // Kernel reuse across sizes (kernel_reuse.h): plans built from dynamic-shape
  // graphs, those of them that bound a kernel another size compiled, and
  // structures whose engines refused dynamic shapes.
  int64_t dynamic_plans = 0;
  int64_t kernels_reused = 0;
  int64_t dynamic_refused = 0;
  double build_seconds = 0;       // on the calling threads (the first step waits for these)
  double background_seconds = 0;  // on the background builders
  RestoreTimes restore_times;     // the restores' breakdown, summed over both kinds of thread
};

// One line of the plan timeline: when a plan was built, restored, queued or
// swapped in, and by which thread.
struct PlanEvent {
  double at_seconds = 0;  // since the process started (plan_cache.cc's static initialisation)
  std::string event;      // "restored", "built", "lazy", "pending", "background", "swapped",
                          // "unsupported", "warm-up"
  std::string graph;      // Graph::pattern()
  int64_t engine_id = -1;
  double build_ms = 0;
  int thread = 0;  // 0: the first thread that built a plan (usually the main thread), then 1, 2, ...
  std::string detail;  // a restore's breakdown (RestoreTimes), else ""
};

class PlanCache {
 public:
  static PlanCache& global();

  // The plan for `key`, made from `graph` on a miss under the key's policy and
  // the plan-build mode. Null when no engine supports it, or (lazy mode, with
  // `has_fallback`) while the best plan is built in the background and the op
  // runs on its tier below cuDNN, or (with `has_fallback`, inside a
  // VariantWalk) when a better variant of the op is pending: then a miss is
  // deferred, neither built nor cached (variant_walk.h).
  std::shared_ptr<const Plan> get(const PlanKey& key, const Graph& graph, bool has_fallback = false);

  // Lazy mode: queues the background build of a key the op will only meet
  // after a swap (the backward of a forward variant that is pending), so that
  // it is swapped in with that variant instead of a round later. Does nothing
  // when the key is cached or plans are not built lazily.
  void prefetch(const PlanKey& key, const Graph& graph);
  // Whether `key` waits for its background build with nothing to run meanwhile.
  bool pending_without_plan(const PlanKey& key) const;

  // Swaps in the plans background builds finished; returns how many keys
  // changed plan. Call at a step boundary: does nothing while the calling
  // thread's stream is capturing. Reserves the new plans' workspace.
  int apply_pending();
  // Incremented by every apply_pending() that changed a plan.
  uint64_t generation() const { return generation_.load(); }
  // Blocks until no background build is queued or running (tests, warm-up).
  void wait_for_background_builds();
  // Background builds queued or running.
  size_t background_outstanding() const;
  // Whether background builds finished since the last apply_pending().
  bool swaps_waiting() const { return any_finished_.load(); }
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
    PlanKey key;
    std::shared_ptr<const Plan> plan;
    PlanInfo info;
    uint64_t ticket = 0;  // the outstanding background build (0: none)
  };
  struct Finished {  // a background build or restore, waiting for apply_pending()
    PlanKey key;
    uint64_t ticket;
    std::shared_ptr<const Plan> plan;  // null: no engine works
    std::string why_none;
    double build_ms;
    bool restored = false;  // the plan came from the plan files
    // A first stage (kernel_reuse.h): the key stays pending for its static plan,
    // which the same build posts next, to be swapped in at a later boundary.
    bool first_stage = false;
  };
  // Why a key waits for a builder.
  enum class Pending { Build, Restore };
  void evict_over_capacity();
  // Lazy mode's first plan for a miss; false when the key must be built now.
  bool start_lazily(const PlanKey& key, const Graph& graph, bool has_fallback, Selection& selection,
                    uint64_t& ticket);
  // select_plan, with the plan reported to kernel_reuse.h.
  Selection select_static(const PlanKey& key, const Graph& graph, const SelectOptions& options);
  // Posts a background build's result for apply_pending().
  void post(Finished done);
  // kernel_reuse.h's first stage for a pending key: posts its dynamic-shape
  // plan, when there is one. Returns whether it did.
  bool build_first_stage(const PlanKey& key, const Graph& graph, uint64_t ticket,
                         const SelectOptions& options);
  // The builder's job: restores the key's plan file when it has one that
  // restores, else selects the best plan (and saves it).
  void build_in_background(PlanKey key, Graph graph, uint64_t ticket);
  // A key met during a capture, prefetched, or (lazy mode) with a plan file:
  // runs on the tier below until its background build or restore is swapped
  // in. Returns null, the plan to run now.
  std::shared_ptr<const Plan> add_pending(const PlanKey& key, const Graph& graph, std::string name,
                                          double ms, Pending why = Pending::Build);
  // A restore's timeline event and its share of the stats.
  void record_restore(const char* event, const std::string& graph, int64_t engine_id, double ms,
                      const RestoreTimes& times);
  void record(std::string event, const std::string& graph, int64_t engine_id, double build_ms,
              std::string detail = {});

  mutable std::mutex mutex_;
  // Lazy mode: graph structures (sizes left out) whose quick look for a
  // precompiled stand-in found none; their other sizes go straight to the tier
  // below while the background build looks properly.
  std::unordered_set<std::string> without_stand_in_;
  std::list<Entry> lru_;
  std::unordered_map<PlanKey, std::list<Entry>::iterator, PlanKeyHash> index_;
  size_t capacity_;
  PlanCacheStats stats_;
  std::atomic<uint64_t> generation_ = 0;
  uint64_t next_ticket_ = 1;

  // Background builders post here; never under mutex_, which a synchronous build holds.
  mutable std::mutex finished_mutex_;
  std::vector<Finished> finished_;
  std::atomic<bool> any_finished_ = false;
  double background_seconds_ = 0;
  int64_t background_builds_ = 0;
  RestoreTimes restore_times_;

  mutable std::mutex timeline_mutex_;
  std::vector<PlanEvent> timeline_;
};

// PlanCache::global().apply_pending(): the step-boundary hook for training
// loops that do not go through optim::TrainStep. Cheap when nothing finished.
int apply_pending_plans();

// The key of `graph` under the calling thread's policy, on the current device.
PlanKey plan_key(const Graph& graph);

// A graph's structure: its pattern without the sizes (layouts and dtypes stay)
// and which tensor feeds which node port, under the key's policy and device
// ("relu_fwd nhwc bf16 nhwc bf16" for every batch and width). What the cache,
// and a caller that probes graphs, remember per structure rather than per key.
// The wiring tells apart graphs of one pattern: batch norm + ReLU's mask
// compared from the pre-ReLU value (no engine) and from the output (one).
std::string structure_of(const PlanKey& key, const Graph& graph);

// The one way ops run a graph: looks its plan up (building it on a miss) and
// executes it with `pointers` and the shared workspace. Returns false when no
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
