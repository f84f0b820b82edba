// File: core/cudnn/kernel_reuse.h
// Kernel reuse across batch sizes, as lazy plan building's first stage for a
// new size of a layer.
//
// A runtime-compiled engine compiles its kernel (NVRTC) for one set of sizes,
// 0.1-0.7 s each time. A plan made from a dynamic-shape graph
// (Graph::set_dynamic_shape) and finalized with a kernel cache binds a kernel
// that an earlier plan of the same structure left in that cache instead of
// compiling one. On an H100 with cuDNN 9.19, mnist_net's fused
// linear+bias+ReLU took 137-149 ms to finalize when it compiled and under
// 0.1 ms when it bound the cached kernel, for batches 96 and 1024.
//
// Dynamic-shape kernels are not the fastest for a size: that one ran in 30 us
// at batch 128, against 15 us for the static plan. So they are a stage, not
// the end. In lazy mode, a new size of a layer whose static plan (for another
// size) compiles at run time works like this:
//   1. It runs on the stand-in or the tier below.
//   2. A builder makes a dynamic-shape plan through the structure's one kernel
//      cache. Only the first such size compiles; the others bind its kernel in
//      milliseconds. The plan is swapped in at the next step boundary.
//   3. The same builder then builds the size's static plan, as every lazy key
//      gets, and it is swapped in at a later step boundary.
// So the steady state is unchanged and only static plans reach the plan files.
// The eager and precompiled modes, and a deterministic policy, build static
// plans only.
//
// Engines that refuse dynamic shapes mark the structure, which then skips the
// first stage. On cuDNN 9.19 the runtime-compiled batch-norm and pooling
// engines do so: their heuristics return no engine for a dynamic-shape graph,
// and named, such an engine says "This engine currently does not support
// dynamic shape". cuDNN's kernel-cache serialization holds no kernels (its
// JSON stayed 1959 bytes across a compile), so reuse cannot outlive the process.
//
// A structure is plan_key.h's structure_of (the graph's pattern without its
// sizes, plus the policy and the device) with every size but the batch put
// back. The batch sizes of one layer share a kernel; two layers of one pattern
// and other widths (lenet5's two linear+ReLU) do not. Thread-safe: the builders
// select plans for several keys at once, and builds through one cache take turns.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/cudnn/plan.h"
#include "core/cudnn/plan_key.h"

namespace loom::cudnn {

struct KernelReuseStats {
  int64_t dynamic_plans = 0;       // first-stage plans built from dynamic-shape graphs
  int64_t kernels_reused = 0;      // of those, plans that bound a kernel another size compiled
  int64_t structures_refused = 0;  // structures whose engines refused dynamic shapes
};

class KernelReuse {
 public:
  static KernelReuse& global();

  // Records `key`'s static plan, selected or restored. One that compiles at
  // run time opens its structure's other sizes to dynamic-shape plans.
  void note_static_plan(const PlanKey& key, const Graph& graph, const PlanNotes& notes);
  // The first stage for `key`: a dynamic-shape plan through its structure's
  // kernel cache. Returns nullopt when no static plan of the structure has
  // compiled at run time yet, when the structure refused dynamic shapes, and
  // when no dynamic-shape engine works for `key`, which marks the structure
  // as refusing.
  std::optional<Selection> select_dynamic(const PlanKey& key, const Graph& graph, cudnnHandle_t handle,
                                          const SelectOptions& options);

  KernelReuseStats stats() const;
  // Forgets every structure and its cache (PlanCache::clear).
  void clear();

 private:
  struct Structure;
  void refuse(Structure& structure);

  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Structure>> structures_;
  KernelReuseStats stats_;
};

}  // namespace loom::cudnn
