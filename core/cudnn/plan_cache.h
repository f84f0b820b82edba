// File: core/cudnn/plan_cache.h
// Graph -> cached plan, keyed by the graph's canonical form (graph.h), the
// numerics policy and the device. A miss restores the plan from the plan files
// (plan_store.h) when an earlier process saved it, else selects a plan
// (plan.h), caches it and saves it; a graph no engine supports is cached as
// unsupported too, so it is never probed twice. LRU with a configurable
// capacity, guarded by a mutex.
//
//   Graph g = ...;  // the op's graph, described on every call (cheap: no cuDNN calls)
//   if (!run_plan(g, {{kX, x.data}, {kY, y.data}}, "Loom CUDA kernels")) run_the_tier_below();
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
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
  int64_t hits = 0;
  int candidates_seen = 0;
  std::string why_unsupported;
  std::string fallback;  // the tier that runs an unsupported key ("" when none has)
};

struct PlanCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t plans_built = 0;
  int64_t plans_restored = 0;  // read from the plan files instead of built
  int64_t unsupported = 0;
  int64_t evictions = 0;
  int64_t fallback_runs = 0;  // runs of a key without an engine on the tier below cuDNN
  double build_seconds = 0;
};

class PlanCache {
 public:
  static PlanCache& global();

  // The plan for `key`, made from `graph` on a miss under the key's policy.
  // Null when no engine supports it.
  std::shared_ptr<const Plan> get(const PlanKey& key, const Graph& graph);

  // Why `key` has no plan ("" when it has one or was never built).
  std::string why_unsupported(const PlanKey& key) const;
  // Records that `key`, which has no plan, ran on `tier` (a Loom CUDA kernel,
  // cuDNN's legacy API): explain() shows it, stats() counts the runs.
  void record_fallback(const PlanKey& key, std::string_view tier);

  PlanCacheStats stats() const;
  std::vector<PlanInfo> entries() const;  // most recently used first
  std::string explain() const;            // a table of entries() plus the counters
  void set_capacity(size_t capacity);     // LOOM_CUDNN_PLAN_CACHE_LIMIT sets the initial one
  void clear();

 private:
  PlanCache();
  struct Entry {
    PlanKey key;
    std::shared_ptr<const Plan> plan;
    PlanInfo info;
  };
  void evict_over_capacity();

  mutable std::mutex mutex_;
  std::list<Entry> lru_;
  std::unordered_map<PlanKey, std::list<Entry>::iterator, PlanKeyHash> index_;
  size_t capacity_;
  PlanCacheStats stats_;
};

// The key of `graph` under the calling thread's policy, on the current device.
PlanKey plan_key(const Graph& graph);

// The one way ops run a graph: looks its plan up (building it on a miss) and
// executes it with `pointers` and the shared workspace. Returns false when no
// engine supports the graph; when `fallback_tier` is not empty the key is then
// recorded as running there (PlanCache::record_fallback), and the caller runs it.
bool run_plan(const Graph& graph, const VariantPointers& pointers, std::string_view fallback_tier);

}  // namespace loom::cudnn
