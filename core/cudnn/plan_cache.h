// File: core/cudnn/plan_cache.h
// Plain key -> cached plan. A miss restores the plan from the plan files
// (plan_store.h) when an earlier process saved it, else builds the graph,
// selects a plan (plan.h), caches it and saves it; a graph no engine supports
// is cached as unsupported too, so it is never probed twice. LRU with a
// configurable capacity, guarded by a mutex.
//
//   PlanKey key(GraphKind::ConvForward, numerics_policy());
//   key.add_tensor(x).add_tensor(w).add_tensor(y).add({stride_h, stride_w, ...});
//   std::shared_ptr<const Plan> plan = PlanCache::global().get(key, [&] { return make_graph(); });
#pragma once

#include <array>
#include <functional>
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

enum class GraphKind : uint8_t {
  ConvForward,
  ConvBackwardData,
  ConvBackwardFilter,
  Matmul,
  BatchNormForward,
  BatchNormBackward,
  PoolForward,
  PoolBackward,
  Pointwise,
  PointwiseBackward,
  Reduction,
  // Fused patterns (core/cudnn/fused.h).
  ConvBiasReluForward,
  BatchNormReluForward,
  BatchNormReluBackward,
  ConvBackwardDataRelu,
  MatmulBiasRelu,
};

std::string_view graph_kind_name(GraphKind kind);

struct PlanKey {
  static constexpr int kMaxValues = 160;

  PlanKey(GraphKind kind, const NumericsPolicy& policy, int device = 0);

  PlanKey& add(int64_t value);
  PlanKey& add(std::initializer_list<int64_t> values);
  // dims, strides, dtype and the byte alignment of the pointer.
  PlanKey& add_tensor(const TensorSpec& tensor);
  bool operator==(const PlanKey& other) const;

  GraphKind kind;
  Precision precision;
  bool deterministic;
  bool autotune;
  int32_t device;
  int32_t count = 0;
  std::array<int64_t, kMaxValues> values{};
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const;
};

struct PlanInfo {
  std::string graph;
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

  // The plan for `key`; on a miss, builds make_graph() and selects a plan with
  // `options` (its policy is taken from the key). Null when no engine supports it.
  std::shared_ptr<const Plan> get(const PlanKey& key, const std::function<Graph()>& make_graph,
                                  bool precision_filter_applies);

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

}  // namespace loom::cudnn
