// File: core/cudnn/kernel_reuse.cc
// Reusing a plan's kernel across batch sizes, lazy building's first stage.
#include "core/cudnn/kernel_reuse.h"

#include <fmt/format.h>

#include <utility>

#include "core/error.h"

namespace loom::cudnn {

namespace {

// The rows a graph is run for: a 4-D tensor's first dim (N), a 3-D (matmul)
// tensor's second (M); 0 for a graph with neither.
int64_t batch_of(const Graph& graph) {
  for (const TensorSpec& t : graph.tensors()) {
    if (t.is_virtual || t.by_value) continue;
    if (t.dims.size() == 4) return t.dims[0];
    if (t.dims.size() == 3) return t.dims[1];
  }
  return 0;
}

// structure_of plus every tensor's dims but the batch ("N"). A dim equal to
// the batch by coincidence (a weight's 128 input features at batch 128) only
// joins or splits structures, never gives a wrong result: a dynamic-shape plan
// is built for the sizes it runs.
std::string reuse_structure(const PlanKey& key, const Graph& graph) {
  const int64_t batch = batch_of(graph);
  std::string out = structure_of(key, graph);
  for (const TensorSpec& t : graph.tensors()) {
    out += fmt::format(" {}:", t.uid);
    for (size_t d = 0; d < t.dims.size(); ++d) {
      const bool batch_dim = t.dims[d] == batch && ((t.dims.size() == 4 && d == 0) ||
                                                    (t.dims.size() == 3 && d == 1));
      out += batch_dim ? std::string("N,") : fmt::format("{},", t.dims[d]);
    }
  }
  return out;
}

}  // namespace

struct KernelReuse::Structure {
  bool refused = false;  // guarded by KernelReuse::mutex_
  std::mutex building;   // held through a dynamic build: the builds share `cache`
  std::shared_ptr<const BuiltGraph> cache_graph;  // the dynamic-shape graph `cache` was made with
  std::optional<Descriptor> cache;
};

KernelReuse& KernelReuse::global() {
  static KernelReuse* const reuse = new KernelReuse();  // builders may run during exit
  return *reuse;
}

void KernelReuse::note_static_plan(const PlanKey& key, const Graph& graph, const PlanNotes& notes) {
  if (!compiles_at_run_time(notes)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<Structure>& structure = structures_[reuse_structure(key, graph)];
  if (!structure) structure = std::make_shared<Structure>();
}

void KernelReuse::refuse(Structure& structure) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!structure.refused) ++stats_.structures_refused;
  structure.refused = true;
}

std::optional<Selection> KernelReuse::select_dynamic(const PlanKey& key, const Graph& graph,
                                                     cudnnHandle_t handle, const SelectOptions& options) {
  std::shared_ptr<Structure> structure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = structures_.find(reuse_structure(key, graph));
    if (it == structures_.end() || it->second->refused) return std::nullopt;
    structure = it->second;
  }
  std::lock_guard<std::mutex> building(structure->building);
  Graph dynamic = graph;
  dynamic.set_dynamic_shape(true);
  Selection selection;
  try {
    if (!structure->cache) {
      auto made_with = std::make_shared<const BuiltGraph>(dynamic, handle);
      Descriptor cache(CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR);
      cache.set_descriptor(CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH, made_with->operation_graph());
      cache.finalize();
      structure->cache_graph = std::move(made_with);
      structure->cache = std::move(cache);
    }
    SelectOptions through_cache = options;
    through_cache.kernel_cache = &*structure->cache;
    selection = select_plan(dynamic, handle, through_cache);
  } catch (const CudnnError&) {
    refuse(*structure);  // cuDNN refused the dynamic-shape graph itself
    return std::nullopt;
  }
  if (!selection.plan) {
    refuse(*structure);
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.dynamic_plans;
  if (selection.plan->notes().kernel_reused) ++stats_.kernels_reused;
  return selection;
}

KernelReuseStats KernelReuse::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void KernelReuse::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  structures_.clear();  // builds still running keep their structures alive until they end
  stats_ = {};
}

}  // namespace loom::cudnn
