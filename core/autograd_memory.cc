// File: core/autograd_memory.cc
// Saved-tensor accounting: releases a graph node by node and measures what each release frees.
#include "core/autograd_memory.h"

#include <algorithm>
#include <map>

#include "core/autograd_internal.h"
#include "core/error.h"
#include "core/storage_stats.h"

namespace loom {

std::vector<SavedTensorBytes> release_saved_tensors(const Tensor& root) {
  LOOM_CHECK(root.defined() && root.grad_fn() != nullptr, AutogradError,
             "[release_saved_tensors] this tensor has no autograd graph (it is a leaf or was made "
             "without grad); pass the loss of a forward run with grad mode on");
  const DeviceType type = root.device().type;
  std::map<std::string, SavedTensorBytes> by_op;
  // The nodes stay alive while walked: the root holds the first, each node its next.
  const std::shared_ptr<Node> first = root.grad_fn();
  for (Node* node : backward_order(first.get())) {
    const size_t before = storage_bytes_in_use(type);
    node->release();
    const size_t after = storage_bytes_in_use(type);
    SavedTensorBytes& row = by_op[node->name()];
    row.op = node->name();
    row.nodes += 1;
    row.bytes += before > after ? before - after : 0;
  }
  std::vector<SavedTensorBytes> rows;
  for (auto& [name, row] : by_op) rows.push_back(std::move(row));
  std::stable_sort(rows.begin(), rows.end(),
                   [](const SavedTensorBytes& a, const SavedTensorBytes& b) { return a.bytes > b.bytes; });
  return rows;
}

size_t total_bytes(const std::vector<SavedTensorBytes>& rows) {
  size_t total = 0;
  for (const SavedTensorBytes& row : rows) total += row.bytes;
  return total;
}

}  // namespace loom
