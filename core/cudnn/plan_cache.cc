#include "core/cudnn/plan_cache.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/cudnn/context.h"
#include "core/cudnn/plan_store.h"
#include "core/error.h"

namespace loom::cudnn {

PlanKey::PlanKey(const Graph& graph, const NumericsPolicy& policy, int device)
    : policy_(policy), device_(device) {
  values_.reserve(96);
  graph.append_canonical(values_);
  // FNV-1a over the policy, the device and the canonical form.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(static_cast<uint64_t>(policy.precision) | (uint64_t{policy.deterministic} << 8) |
      (uint64_t{policy.autotune} << 9));
  mix(static_cast<uint64_t>(device));
  for (int64_t v : values_) mix(static_cast<uint64_t>(v));
  hash_ = static_cast<size_t>(h);
}

bool PlanKey::operator==(const PlanKey& other) const {
  return hash_ == other.hash_ && policy_ == other.policy_ && device_ == other.device_ &&
         values_ == other.values_;
}

PlanCache::PlanCache() : capacity_(1024) {
  if (const char* limit = std::getenv("LOOM_CUDNN_PLAN_CACHE_LIMIT")) {
    capacity_ = static_cast<size_t>(std::max(1L, std::atol(limit)));
  }
}

PlanCache& PlanCache::global() {
  static PlanCache cache;
  return cache;
}

std::shared_ptr<const Plan> PlanCache::get(const PlanKey& key, const Graph& graph) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    ++stats_.hits;
    ++it->second->info.hits;
    return it->second->plan;
  }
  ++stats_.misses;
  auto start = std::chrono::steady_clock::now();
  std::string name = graph.pattern();
  // Selection test-runs candidates and synchronizes, which a capturing stream
  // cannot do; the result would be a bogus "unsupported".
  LOOM_CHECK(!cuda::is_capturing(), CudnnError,
             "[cudnn] the plan for {} does not exist yet and cannot be built while a CUDA graph "
             "is being captured; run the step once eagerly before capturing it",
             name);
  Selection selection;
  const SelectOptions options{.policy = key.policy()};
  const PlanStore& store = PlanStore::global();
  if (std::optional<StoredPlan> stored = store.load(key)) {
    selection.plan = restore_plan(graph, handle(), stored->json, stored->notes, options);
  }
  const bool restored = selection.plan != nullptr;
  if (!restored) {
    selection = select_plan(graph, handle(), options);  // a stale file is replaced
    if (selection.plan) store.save(key, *selection.plan);
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  stats_.build_seconds += ms / 1000.0;
  PlanInfo info{.graph = name, .supported = selection.plan != nullptr, .notes = {},
                .workspace_bytes = 0, .build_ms = ms, .restored = restored, .hits = 0,
                .candidates_seen = selection.candidates_seen, .why_unsupported = selection.why_none, .fallback = {}};
  if (selection.plan) {
    ++(restored ? stats_.plans_restored : stats_.plans_built);
    info.notes = selection.plan->notes();
    info.workspace_bytes = selection.plan->workspace_bytes();
    workspace(static_cast<size_t>(info.workspace_bytes));  // reserve now, outside any capture
  } else {
    ++stats_.unsupported;
  }
  lru_.push_front(Entry{key, std::shared_ptr<const Plan>(std::move(selection.plan)), std::move(info)});
  index_.emplace(key, lru_.begin());
  std::shared_ptr<const Plan> plan = lru_.front().plan;
  evict_over_capacity();
  return plan;
}

void PlanCache::evict_over_capacity() {
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
    ++stats_.evictions;
  }
}

std::string PlanCache::why_unsupported(const PlanKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  return it == index_.end() ? "" : it->second->info.why_unsupported;
}

void PlanCache::record_fallback(const PlanKey& key, std::string_view tier) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.fallback_runs;
  if (auto it = index_.find(key); it != index_.end() && it->second->info.fallback.empty()) {
    it->second->info.fallback = tier;
  }
}

PlanCacheStats PlanCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::vector<PlanInfo> PlanCache::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PlanInfo> out;
  for (const Entry& e : lru_) out.push_back(e.info);
  return out;
}

std::string PlanCache::explain() const {
  PlanCacheStats s = stats();
  std::string out = fmt::format(
      "cuDNN plan cache (cuDNN {}): {} entries, {} hits, {} misses, {} plans built, {} restored "
      "from {}, {} unsupported, {} runs on the tier below cuDNN, {:.3f} s building\n",
      loaded_version(), entries().size(), s.hits, s.misses, s.plans_built, s.plans_restored,
      PlanStore::global().enabled() ? PlanStore::global().directory() : "(plan files off)",
      s.unsupported, s.fallback_runs, s.build_seconds);
  out += fmt::format("{:<44} {:>7} {:>10} {:>9} {:>6}  {}\n", "graph", "engine", "workspace",
                     "build ms", "hits", "notes");
  for (const PlanInfo& e : entries()) {
    if (!e.supported) {
      out += fmt::format("{:<44} {:>7} {:>10} {:>9.1f} {:>6}  unsupported{}: {}\n", e.graph, "-", "-",
                         e.build_ms, e.hits,
                         e.fallback.empty() ? "" : fmt::format(", runs on {}", e.fallback),
                         e.why_unsupported);
      continue;
    }
    std::vector<std::string> notes = e.notes.numerical;
    notes.insert(notes.end(), e.notes.behavior.begin(), e.notes.behavior.end());
    if (e.restored) notes.push_back("RESTORED");
    out += fmt::format("{:<44} {:>7} {:>10} {:>9.1f} {:>6}  {}\n", e.graph, e.notes.engine_id,
                       e.workspace_bytes, e.build_ms, e.hits,
                       notes.empty() ? "-" : fmt::format("{}", fmt::join(notes, ",")));
  }
  return out;
}

void PlanCache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = std::max<size_t>(capacity, 1);
  evict_over_capacity();
}

void PlanCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  lru_.clear();
  index_.clear();
  stats_ = {};
}

PlanKey plan_key(const Graph& graph) {
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  return PlanKey(graph, numerics_policy(), device);
}

bool run_plan(const Graph& graph, const VariantPointers& pointers, std::string_view fallback_tier) {
  PlanCache& cache = PlanCache::global();
  const PlanKey key = plan_key(graph);
  std::shared_ptr<const Plan> plan = cache.get(key, graph);
  if (!plan) {
    if (!fallback_tier.empty()) cache.record_fallback(key, fallback_tier);
    return false;
  }
  plan->execute(handle(), pointers, workspace(static_cast<size_t>(plan->workspace_bytes())));
  return true;
}

}  // namespace loom::cudnn
