// File: core/autograd_memory.h
// What a training step's autograd graph keeps alive between its forward and
// its backward: the saved tensors, in bytes per op, so that Loom's activation
// memory can be set against PyTorch's (torch.autograd.graph.saved_tensors_hooks)
// op by op, on the CPU as on the GPU.
//
//   Tensor loss = cross_entropy(net.forward(x), y);
//   for (const SavedTensorBytes& row : release_saved_tensors(loss)) {
//     fmt::print("{:<16} {:>4} nodes {:>12} bytes\n", row.op, row.nodes, row.bytes);
//   }
//   // the graph is gone: loss.backward() now throws
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

struct SavedTensorBytes {
  std::string op;     // the node's name: "conv2d", "batch_norm", "relu", ...
  int64_t nodes = 0;  // nodes of that name in the graph
  size_t bytes = 0;   // tensor storage that releasing them freed
};

// Frees the graph behind `root` node by node, in the order a backward without
// retain_graph would, and returns per op name the bytes of tensor storage (on
// root's device type) that each release freed, largest first. A tensor two
// nodes saved is counted once, for the node released last (the earlier one in
// the forward), so the bytes sum to what the graph held. Tensors someone else
// still holds (the input batch, parameters, a handle kept to an intermediate)
// are not freed and not counted: drop such handles first. Consumes the graph:
// a later backward through it throws AutogradError.
std::vector<SavedTensorBytes> release_saved_tensors(const Tensor& root);

// The sum of the rows' bytes.
size_t total_bytes(const std::vector<SavedTensorBytes>& rows);

}  // namespace loom
