#include "core/cudnn/kernel_reuse.h"

#include <fmt/format.h>

#include <utility>

#include "core/error.h"

namespace loom::cudnn {

struct KernelReuse::Structure {
  enum class State { Deciding, Reusable, StaticOnly };
  PlanKey own_size;
  State state = State::Deciding;  // guarded by KernelReuse::mutex_
  std::mutex building;            // held through a dynamic build: builds share `cache`
  std::shared_ptr<const BuiltGraph> cache_graph;  // the dynamic-shape graph `cache` was made with
  std::optional<Descriptor> cache;

  explicit Structure(PlanKey key) : own_size(std::move(key)) {}
};

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

// structure_of plus every tensor's dims but the batch ("N"): two layers of one
// pattern but other widths (lenet5's two linear+ReLU) stay apart, each with a
// static plan of its own, while the batch sizes of one layer meet. A dim equal
// to the batch by coincidence (a weight's 128 input features at batch 128)
// only costs reuse, never a wrong result: a dynamic-shape plan is built for
// the sizes it runs.
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

KernelReuse& KernelReuse::global() {
  static KernelReuse* const reuse = new KernelReuse();  // builders may run during exit
  return *reuse;
}

std::shared_ptr<KernelReuse::Structure> KernelReuse::enter(const std::string& name, const PlanKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<Structure>& structure = structures_[name];
  if (!structure) structure = std::make_shared<Structure>(key);
  return structure;
}

void KernelReuse::decide(Structure& structure, const PlanNotes* notes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool compiles = notes != nullptr && compiles_at_run_time(*notes);
    structure.state = compiles ? Structure::State::Reusable : Structure::State::StaticOnly;
  }
  decided_.notify_all();
}

void KernelReuse::refuse(Structure& structure) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (structure.state != Structure::State::StaticOnly) ++stats_.structures_refused;
  structure.state = Structure::State::StaticOnly;
}

Selection KernelReuse::select(const PlanKey& key, const Graph& graph, cudnnHandle_t handle,
                              const SelectOptions& options, const std::function<Selection()>& select_static) {
  if (options.precompiled_only || options.first_working) return select_static();
  std::shared_ptr<Structure> structure = enter(reuse_structure(key, graph), key);
  bool own_size = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    own_size = structure->own_size == key;
    // The own size's build is under way on another thread (enter() happens
    // inside a build), so this wait ends when it does.
    if (!own_size) {
      decided_.wait(lock, [&] { return structure->state != Structure::State::Deciding; });
    }
  }
  if (own_size) {
    Selection selection;
    try {
      selection = select_static();
    } catch (...) {
      decide(*structure, nullptr);
      throw;
    }
    decide(*structure, selection.plan ? &selection.plan->notes() : nullptr);
    return selection;
  }
  if (std::optional<Selection> dynamic = select_dynamic(*structure, graph, handle, options)) {
    return std::move(*dynamic);
  }
  return select_static();
}

std::optional<Selection> KernelReuse::select_dynamic(Structure& structure, const Graph& graph,
                                                     cudnnHandle_t handle, const SelectOptions& options) {
  std::lock_guard<std::mutex> building(structure.building);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (structure.state != Structure::State::Reusable) return std::nullopt;
  }
  Graph dynamic = graph;
  dynamic.set_dynamic_shape(true);
  Selection selection;
  try {
    if (!structure.cache) {
      auto made_with = std::make_shared<const BuiltGraph>(dynamic, handle);
      Descriptor cache(CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR);
      cache.set_descriptor(CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH, made_with->operation_graph());
      cache.finalize();
      structure.cache_graph = std::move(made_with);
      structure.cache = std::move(cache);
    }
    SelectOptions through_cache = options;
    through_cache.kernel_cache = &*structure.cache;
    selection = select_plan(dynamic, handle, through_cache);
  } catch (const CudnnError&) {
    refuse(structure);  // cuDNN refused the dynamic-shape graph itself
    return std::nullopt;
  }
  if (!selection.plan) {
    refuse(structure);
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.dynamic_plans;
  if (selection.plan->notes().kernel_reused) ++stats_.kernels_reused;
  return selection;
}

void KernelReuse::note_restored(const PlanKey& key, const Graph& graph, const PlanNotes& notes) {
  // A restored dynamic-shape plan belongs to a later size: the own size keeps a static one.
  if (notes.dynamic_shape) return;
  std::shared_ptr<Structure> structure = enter(reuse_structure(key, graph), key);
  bool undecided_own_size = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    undecided_own_size = structure->own_size == key && structure->state == Structure::State::Deciding;
  }
  if (undecided_own_size) decide(*structure, &notes);
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
