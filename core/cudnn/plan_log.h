// File: core/cudnn/plan_log.h
// The plan cache's record (plan_cache.h): its counters, the timeline of when
// each plan was built, restored, queued or swapped in and by which thread, and
// the explain() table. Thread-safe: the calling threads and the background
// builders (plan_builder.h) write to it.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/cudnn/plan.h"

namespace loom::cudnn {

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
  int candidates_timed = 0;  // of the plan built before the key's first run
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
  double at_seconds = 0;  // since the process started (plan_log.cc's static initialisation)
  std::string event;      // "restored", "built", "lazy", "pending", "background", "swapped",
                          // "unsupported", "warm-up"
  std::string graph;      // Graph::pattern()
  int64_t engine_id = -1;
  double build_ms = 0;
  int thread = 0;  // 0: the first thread that built a plan (usually the main thread), then 1, 2, ...
  std::string detail;  // a restore's breakdown (RestoreTimes), else ""
};

class PlanLog {
 public:
  // Adds `n` to a counter of stats().
  void count(int64_t PlanCacheStats::*counter, int64_t n = 1);
  // Time a calling thread spent building (or restoring) a plan.
  void add_build_ms(double ms);
  // A background build or restore that finished, and how long it took.
  void add_background(double ms, bool restored);

  // A timeline event.
  void record(std::string event, const std::string& graph, int64_t engine_id, double build_ms,
              std::string detail = {});
  // A restore's timeline event and its share of the stats.
  void record_restore(const char* event, const std::string& graph, int64_t engine_id, double ms,
                      const RestoreTimes& times);

  // The counters (without kernel reuse's, which kernel_reuse.h keeps).
  PlanCacheStats stats() const;
  // The timeline, oldest first, and as a table.
  std::vector<PlanEvent> timeline() const;
  std::string timeline_table() const;
  void clear();

 private:
  mutable std::mutex mutex_;
  PlanCacheStats stats_;
  std::vector<PlanEvent> timeline_;
};

// The calling thread's number on the timeline (PlanEvent::thread), given at its first call.
int timeline_thread();

// The timeline's word on a plan built from a dynamic-shape graph (kernel_reuse.h).
std::string shape_detail(const PlanNotes& notes);

// explain()'s table: the counters, then one line per entry (most recently used first).
std::string explain_table(const std::vector<PlanInfo>& entries, const PlanCacheStats& stats);

}  // namespace loom::cudnn
