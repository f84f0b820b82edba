// File: core/cudnn/plan_key.cc
// Plan keys, graph structures and the request a miss is built from (plan_key.h).
#include "core/cudnn/plan_key.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/cudnn/variant_walk.h"

namespace loom::cudnn {

namespace {

// LOOM_CUDNN_BACKGROUND_RESTORE=0 restores lazy mode's keys on the calling
// thread, as the other modes do: for comparing the two on one machine.
bool restores_in_background() {
  static const bool background = [] {
    const char* text = std::getenv("LOOM_CUDNN_BACKGROUND_RESTORE");
    return text == nullptr || std::string_view(text) != "0";
  }();
  return background;
}

}  // namespace

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

bool builds_lazily(const NumericsPolicy& policy) {
  return plan_build_mode() == PlanBuildMode::Lazy && !policy.deterministic;
}

PlanRequest plan_request(const PlanKey& key, const Graph& graph, bool has_fallback) {
  return PlanRequest{.key = key,
                     .graph = graph,
                     .has_fallback = has_fallback,
                     .lazy = builds_lazily(key.policy()),
                     .precompiled_only = plan_build_mode() == PlanBuildMode::Precompiled,
                     .capturing = cuda::is_capturing(),
                     .defer_misses = VariantWalk::defers_misses(),
                     .background_restore = restores_in_background()};
}

PlanKey plan_key(const Graph& graph) {
  return PlanKey(graph, numerics_policy(), cuda::current_device());
}

std::string structure_of(const PlanKey& key, const Graph& graph) {
  std::string shape_free;
  int depth = 0;
  for (char c : graph.pattern()) {
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (depth == 0) {
      shape_free += c;
    }
  }
  std::string wiring;
  for (const Node& node : graph.nodes()) {
    wiring += '|';
    for (const auto& [port, uid] : node.ports) wiring += fmt::format("{}:{} ", static_cast<int>(port), uid);
  }
  return fmt::format("{} {}{} {} {}", key.device(), precision_name(key.policy().precision),
                     key.policy().deterministic ? " deterministic" : "", shape_free, wiring);
}

}  // namespace loom::cudnn
