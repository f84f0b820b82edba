// File: core/cudnn/kernel_reuse.h
// Kernel reuse across sizes. A runtime-compiled engine compiles its kernel
// (NVRTC) for one set of sizes, 0.1-0.7 s each time. A plan made from a
// dynamic-shape graph (Graph::set_dynamic_shape) and finalized with a kernel
// cache can bind a kernel that an earlier plan of the same structure left in
// that cache, in well under a millisecond. On an H100 with cuDNN 9.19, a
// matmul+bias+ReLU compiled in 137 ms for batch 128 and was then bound for
// batches 96 and 1024 in under 0.1 ms each.
//
// Dynamic-shape kernels are not the fastest for a given size: that matmul ran
// in 30 us, against 15 us for its static plan. So the first size of a structure
// whose plan compiles at run time keeps its static plan; this is normally the
// training batch. Every other size (the tail batch, the evaluation batch) is
// built as a dynamic-shape plan through the structure's one kernel cache: the
// first of them compiles, the rest bind its kernel.
//
// Engines that refuse dynamic shapes mark the structure; its sizes are then
// built as static plans as before, without looking again. On cuDNN 9.19 the
// runtime-compiled batch-norm and pooling engines do so: their heuristics
// return no engine for a dynamic-shape graph, and named, such an engine says
// "This engine currently does not support dynamic shape".
//
// A structure is plan_cache.h's structure_of (the graph's pattern without its
// sizes, plus the policy and the device) with every size but the batch put
// back: the batch sizes of one layer share a kernel, two layers of one
// pattern and other widths do not. Thread-safe: the builders select plans
// for several keys at once, and the builds of one structure take turns, since
// they share its cache.
#pragma once

#include <cudnn.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/cudnn/plan.h"
#include "core/cudnn/plan_cache.h"

namespace loom::cudnn {

struct KernelReuseStats {
  int64_t dynamic_plans = 0;       // plans built from dynamic-shape graphs
  int64_t kernels_reused = 0;      // of those, plans that bound another size's kernel
  int64_t structures_refused = 0;  // structures whose engines refused dynamic shapes
};

class KernelReuse {
 public:
  static KernelReuse& global();

  // Selects `key`'s plan. The first key of a structure to get here is the
  // structure's own size, and `select_static` chooses its plan. A later key of
  // the structure waits until the own size's plan is chosen. If that plan
  // compiles at run time, the later key gets a dynamic-shape plan through the
  // structure's kernel cache; otherwise, and when no dynamic-shape engine
  // works (which marks the structure), it gets `select_static`'s plan too.
  // Lookups that never compile (precompiled-only, first-working) go straight
  // to `select_static`.
  Selection select(const PlanKey& key, const Graph& graph, cudnnHandle_t handle, const SelectOptions& options,
                   const std::function<Selection()>& select_static);
  // `key`'s static plan came from its plan file: it makes `key` its structure's
  // own size, as a selection would have.
  void note_restored(const PlanKey& key, const Graph& graph, const PlanNotes& notes);

  KernelReuseStats stats() const;
  // Forgets every structure and its cache (PlanCache::clear).
  void clear();

 private:
  struct Structure;
  // The structure's entry, made with `key` as its own size when new.
  std::shared_ptr<Structure> enter(const std::string& name, const PlanKey& key);
  // The own size's plan is chosen (null: none works): later sizes stop waiting.
  void decide(Structure& structure, const PlanNotes* notes);
  std::optional<Selection> select_dynamic(Structure& structure, const Graph& graph, cudnnHandle_t handle,
                                          const SelectOptions& options);
  void refuse(Structure& structure);

  mutable std::mutex mutex_;
  std::condition_variable decided_;
  std::unordered_map<std::string, std::shared_ptr<Structure>> structures_;
  KernelReuseStats stats_;
};

}  // namespace loom::cudnn
