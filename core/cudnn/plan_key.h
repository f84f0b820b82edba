// File: core/cudnn/plan_key.h
// What the plan cache (plan_cache.h) is asked: a plan's key (the graph's
// canonical form, the numerics policy, the device) and, on a miss, the request
// that carries everything the build depends on, read once from the calling
// thread so that nothing below looks at thread-locals, the capture state or
// the environment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cudnn/graph.h"
#include "core/cudnn/variant_pointers.h"
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

// A miss: the key, its graph, and how its plan is to be made.
struct PlanRequest {
  const PlanKey& key;
  const Graph& graph;
  // The op has a tier below cuDNN to run while the plan is built or restored.
  bool has_fallback = false;
  // Lazy plan building (plan_build_mode(), not under a deterministic policy):
  // a stand-in or the tier below now, the best plan from a background builder.
  bool lazy = false;
  // The precompiled plan-build mode: only engines that need no runtime compilation.
  bool precompiled_only = false;
  // The calling thread's stream is capturing a CUDA graph: nothing may synchronize.
  bool capturing = false;
  // A better variant of the op is pending (variant_walk.h): a miss is deferred.
  bool defer_misses = false;
  // Lazy mode restores runtime-compiled plans on a builder
  // (LOOM_CUDNN_BACKGROUND_RESTORE, on unless 0).
  bool background_restore = true;
  // The op's pointers, when the op runs the plan right after the lookup: a
  // build on the calling thread tests candidates on them (SelectOptions::operands).
  const VariantPointers* operands = nullptr;
};

// The request for a miss of `key` on the calling thread: reads the plan-build
// mode, the capture state, the variant walk and the environment.
PlanRequest plan_request(const PlanKey& key, const Graph& graph, bool has_fallback);

// Lazy plan building for `policy` under the calling thread's plan-build mode.
bool builds_lazily(const NumericsPolicy& policy);

// The key of `graph` under the calling thread's policy, on the current device.
PlanKey plan_key(const Graph& graph);

// A graph's structure: its pattern without the sizes (layouts and dtypes stay)
// and which tensor feeds which node port, under the key's policy and device
// ("relu_fwd nhwc bf16 nhwc bf16" for every batch and width). What the cache,
// and a caller that probes graphs, remember per structure rather than per key.
// The wiring tells apart graphs of one pattern whose ops are connected
// differently (the same ops, one reading another's output or a graph input).
std::string structure_of(const PlanKey& key, const Graph& graph);

}  // namespace loom::cudnn
