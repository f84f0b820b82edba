// File: core/cudnn/plan_memory.cc
// The memory rules of plan selection: tensors bound as they are, the workspace limit.
#include "core/cudnn/plan_memory.h"

#include <algorithm>

namespace loom::cudnn {

namespace {

bool overlap(const BoundRange& a, const BoundRange& b) {
  if (a.bytes == 0 || b.bytes == 0) return false;  // spans nothing, shares nothing
  return a.begin < b.begin + b.bytes && b.begin < a.begin + a.bytes;
}

}  // namespace

std::vector<bool> bindable_as_is(const std::vector<BoundRange>& ranges) {
  // Every pair: a graph binds a handful of tensors.
  std::vector<bool> as_is(ranges.size(), true);
  for (size_t i = 0; i < ranges.size(); ++i) {
    for (size_t j = i + 1; j < ranges.size(); ++j) {
      if (overlap(ranges[i], ranges[j])) as_is[i] = as_is[j] = false;
    }
  }
  return as_is;
}

size_t preferred_workspace_limit(size_t tensor_bytes) { return std::max(2 * tensor_bytes, kWorkspaceFloor); }

size_t timed_workspace_limit(size_t tensor_bytes, size_t device_free_bytes) {
  return std::max(preferred_workspace_limit(tensor_bytes), device_free_bytes / 2);
}

bool workspace_preferred(int64_t workspace_bytes, size_t limit) {
  return workspace_bytes <= 0 || static_cast<size_t>(workspace_bytes) <= limit;
}

}  // namespace loom::cudnn
