#include "core/cudnn/kernel_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace loom::cudnn {

namespace {

// Stands for a dim left out of the structure form: no tensor has a negative extent.
constexpr int64_t kBatchLeftOut = -1;

// Conv filters and matmul B operands: their dim 0 is out channels, never the batch.
bool is_weight_port(cudnnBackendAttributeName_t port) {
  return port == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W ||
         port == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W ||
         port == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW ||
         port == CUDNN_ATTR_OPERATION_MATMUL_BDESC;
}

std::set<int64_t> weight_uids(const Graph& graph) {
  std::set<int64_t> uids;
  for (const Node& n : graph.nodes()) {
    for (const auto& [port, uid] : n.ports) {
      if (is_weight_port(port)) uids.insert(uid);
    }
  }
  return uids;
}

void append_node(const Node& n, std::vector<int64_t>& out) {
  out.insert(out.end(), {static_cast<int64_t>(n.kind), n.mode, n.phase, static_cast<int64_t>(n.compute),
                         n.parameter.has_value(), std::bit_cast<int64_t>(n.parameter.value_or(0)),
                         static_cast<int64_t>(n.ports.size())});
  for (const auto& [port, uid] : n.ports) out.insert(out.end(), {static_cast<int64_t>(port), uid});
  out.push_back(static_cast<int64_t>(n.params.size()));
  out.insert(out.end(), n.params.begin(), n.params.end());
}

}  // namespace

size_t key_hash(const NumericsPolicy& policy, int device, const std::vector<int64_t>& values) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(static_cast<uint64_t>(policy.precision) | (uint64_t{policy.deterministic} << 8) |
      (uint64_t{policy.autotune} << 9));
  mix(static_cast<uint64_t>(device));
  for (int64_t v : values) mix(static_cast<uint64_t>(v));
  return static_cast<size_t>(h);
}

// Written beside Graph::append_canonical rather than through it: that form is
// the plan key's and keeps every dim.
std::vector<int64_t> structure_form(const Graph& graph) {
  const size_t position = graph.has_node(NodeKind::Matmul) ? 1 : 0;
  const std::vector<TensorSpec>& tensors = graph.tensors();
  const int64_t batch =
      !tensors.empty() && tensors.front().dims.size() > position ? tensors.front().dims[position] : 0;
  const std::set<int64_t> weights = weight_uids(graph);
  std::vector<int64_t> out{static_cast<int64_t>(tensors.size())};
  for (const TensorSpec& t : tensors) {
    auto is_batch = [&](size_t d) { return d == position && t.dims[d] == batch && !weights.contains(t.uid); };
    out.push_back(t.uid);
    out.push_back(static_cast<int64_t>(t.dims.size()));
    for (size_t d = 0; d < t.dims.size(); ++d) out.push_back(is_batch(d) ? kBatchLeftOut : t.dims[d]);
    for (size_t d = 0; d < t.strides.size(); ++d) {
      out.push_back(is_batch(d) || t.dims[d] == 1 ? 0 : t.strides[d]);
    }
    out.insert(out.end(), {static_cast<int64_t>(t.dtype), t.alignment, t.is_virtual, t.by_value});
  }
  out.push_back(static_cast<int64_t>(graph.nodes().size()));
  for (const Node& n : graph.nodes()) append_node(n, out);
  return out;
}

StructureKey::StructureKey(const Graph& graph, const NumericsPolicy& policy, int device)
    : policy_(policy), device_(device), values_(structure_form(graph)),
      hash_(key_hash(policy, device, values_)) {}

bool StructureKey::operator==(const StructureKey& other) const {
  return hash_ == other.hash_ && policy_ == other.policy_ && device_ == other.device_ &&
         values_ == other.values_;
}

bool kernel_cache_applies(const Graph& graph) {
  constexpr int64_t kFullAlignment = 16;
  for (const Node& n : graph.nodes()) {
    if (n.kind != NodeKind::Pointwise && n.kind != NodeKind::NormForward && n.kind != NodeKind::NormBackward) {
      return false;
    }
  }
  return std::all_of(graph.tensors().begin(), graph.tensors().end(), [](const TensorSpec& t) {
    return t.is_virtual || t.by_value || t.alignment >= kFullAlignment;
  });
}

std::string kernel_name(const PlanNotes& notes) {
  return fmt::format("engine {} {}", notes.engine_id, fmt::join(notes.knobs, ","));
}

KernelCache::KernelCache(StructureKey key, StoredKernels stored)
    : key_(std::move(key)), stored_(std::move(stored.contents)),
      chosen_(stored.chosen.begin(), stored.chosen.end()) {}

bool KernelCache::may_try(const PlanNotes& notes) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return !structure_refused_ && !refused_.contains(kernel_name(notes));
}

void KernelCache::refuse_structure() {
  std::lock_guard<std::mutex> lock(state_mutex_);
  structure_refused_ = true;
}

void KernelCache::refuse(const PlanNotes& notes) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  refused_.insert(kernel_name(notes));
}

int64_t KernelCache::refused() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return static_cast<int64_t>(refused_.size()) + (structure_refused_ ? 1 : 0);
}

namespace {

// A finalized cache descriptor bound to `op_graph`, filled from `stored` when given.
Descriptor open_cache(const Descriptor& op_graph, const std::string* stored) {
  Descriptor cache(CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR);
  if (stored != nullptr) {
    cache.set(CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
              static_cast<int64_t>(stored->size()), stored->data());
  }
  cache.set_descriptor(CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH, op_graph);
  cache.finalize();
  return cache;
}

}  // namespace

const Descriptor* KernelCache::bind(std::shared_ptr<const BuiltGraph> graph) {
  if (cache_) return &*cache_;
  if (!stored_.empty()) {
    try {
      cache_ = open_cache(graph->operation_graph(), &stored_);
    } catch (const CudnnError&) {  // another cuDNN build's contents: start empty
    }
    stored_.clear();
  }
  if (!cache_) {
    try {
      cache_ = open_cache(graph->operation_graph(), nullptr);
    } catch (const CudnnError&) {
      refuse_structure();
      return nullptr;
    }
  }
  graph_ = std::move(graph);
  return &*cache_;
}

std::optional<int64_t> KernelCache::contents_bytes() const {
  int64_t count = 0;
  if (cudnnBackendGetAttribute(cache_->get(), CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                               0, &count, nullptr) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return count;
}

void KernelCache::record(const PlanNotes& notes) {
  if (notes.kernel == KernelSource::Reused) {
    ++reused_;
  } else if (notes.kernel == KernelSource::Compiled) {
    ++compiled_;
    unsaved_ = true;
  }
}

bool KernelCache::was_chosen(const PlanNotes& notes) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return chosen_.contains(kernel_name(notes));
}

void KernelCache::remember_chosen(const PlanNotes& notes) {
  if (notes.kernel == KernelSource::Static) return;
  std::lock_guard<std::mutex> lock(state_mutex_);
  chosen_.insert(kernel_name(notes));
}

std::optional<StoredKernels> KernelCache::take_unsaved() {
  std::unique_lock<std::mutex> lock = lock_for_build();
  if (!unsaved_ || !cache_) return std::nullopt;
  unsaved_ = false;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(cache_->get(), CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                               0, &count, nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0) {
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(count), '\0');
  if (cudnnBackendGetAttribute(cache_->get(), CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                               count, &count, text.data()) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  text.resize(std::min(text.size(), static_cast<size_t>(count)));
  std::lock_guard<std::mutex> state(state_mutex_);
  return StoredKernels{std::move(text), std::vector<std::string>(chosen_.begin(), chosen_.end())};
}

}  // namespace loom::cudnn
