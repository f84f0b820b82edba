#include "core/cudnn/plan_cache.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/cuda/stream.h"
#include "core/cudnn/context.h"
#include "core/cudnn/plan_store.h"
#include "core/error.h"

namespace loom::cudnn {

std::string_view graph_kind_name(GraphKind kind) {
  switch (kind) {
    case GraphKind::ConvForward: return "conv_fprop";
    case GraphKind::ConvBackwardData: return "conv_dgrad";
    case GraphKind::ConvBackwardFilter: return "conv_wgrad";
    case GraphKind::Matmul: return "matmul";
    case GraphKind::BatchNormForward: return "bn_fwd_train";
    case GraphKind::BatchNormBackward: return "bn_bwd";
    case GraphKind::PoolForward: return "pool_fwd";
    case GraphKind::PoolBackward: return "pool_bwd";
    case GraphKind::Pointwise: return "pointwise";
    case GraphKind::PointwiseBackward: return "pointwise_bwd";
    case GraphKind::Reduction: return "reduction";
    case GraphKind::ConvBiasReluForward: return "conv_bias_relu_fprop";
    case GraphKind::BatchNormReluForward: return "bn_relu_fwd_train";
    case GraphKind::BatchNormReluBackward: return "bn_drelu_bwd";
    case GraphKind::ConvBackwardDataRelu: return "conv_dgrad_drelu";
    case GraphKind::MatmulBiasRelu: return "matmul_bias_relu";
  }
  return "?";
}

PlanKey::PlanKey(GraphKind kind, const NumericsPolicy& policy, int device)
    : kind(kind), precision(policy.precision), deterministic(policy.deterministic),
      autotune(policy.autotune), device(device) {}

PlanKey& PlanKey::add(int64_t value) {
  LOOM_CHECK(count < kMaxValues, ValueError, "[plan_cache] key for {} exceeds {} values",
             graph_kind_name(kind), kMaxValues);
  values[count++] = value;
  return *this;
}

PlanKey& PlanKey::add(std::initializer_list<int64_t> list) {
  for (int64_t v : list) add(v);
  return *this;
}

PlanKey& PlanKey::add_tensor(const TensorSpec& t) {
  add(static_cast<int64_t>(t.dims.size()));
  for (int64_t d : t.dims) add(d);
  for (size_t i = 0; i < t.strides.size(); ++i) add(t.dims[i] == 1 ? 0 : t.strides[i]);  // size-1 strides do not matter
  return add({static_cast<int64_t>(t.dtype), t.alignment, t.is_virtual, t.by_value});
}

bool PlanKey::operator==(const PlanKey& o) const {
  return kind == o.kind && precision == o.precision && deterministic == o.deterministic &&
         autotune == o.autotune && device == o.device && count == o.count &&
         std::memcmp(values.data(), o.values.data(), sizeof(int64_t) * count) == 0;
}

size_t PlanKeyHash::operator()(const PlanKey& key) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the header and the used values
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(static_cast<uint64_t>(key.kind));
  mix(static_cast<uint64_t>(key.precision) | (key.deterministic << 8) | (key.autotune << 9));
  mix(static_cast<uint64_t>(key.device));
  for (int i = 0; i < key.count; ++i) mix(static_cast<uint64_t>(key.values[i]));
  return static_cast<size_t>(h);
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

std::shared_ptr<const Plan> PlanCache::get(const PlanKey& key, const std::function<Graph()>& make_graph,
                                           bool precision_filter_applies) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    ++stats_.hits;
    ++it->second->info.hits;
    return it->second->plan;
  }
  ++stats_.misses;
  auto start = std::chrono::steady_clock::now();
  Graph graph = make_graph();
  std::string name = graph.name();
  // Selection test-runs candidates and synchronizes, which a capturing stream
  // cannot do; the result would be a bogus "unsupported".
  LOOM_CHECK(!cuda::is_capturing(), CudnnError,
             "[cudnn] the plan for {} does not exist yet and cannot be built while a CUDA graph "
             "is being captured; run the step once eagerly before capturing it",
             name);
  Selection selection;
  const SelectOptions options{.policy = {.precision = key.precision,
                                         .deterministic = key.deterministic,
                                         .autotune = key.autotune},
                              .precision_filter_applies = precision_filter_applies};
  const PlanStore& store = PlanStore::global();
  if (std::optional<StoredPlan> stored = store.load(key)) {
    selection.plan = restore_plan(std::move(graph), handle(), stored->json, stored->notes, options);
    if (!selection.plan) graph = make_graph();  // stale file: build afresh, and replace it
  }
  const bool restored = selection.plan != nullptr;
  if (!restored) {
    selection = select_plan(std::move(graph), handle(), options);
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

}  // namespace loom::cudnn
