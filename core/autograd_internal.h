// File: core/autograd_internal.h
// The engine's graph walk, shared by run_backward and the saved-tensor
// accounting (core/autograd_memory.cc); not part of the public API.
#pragma once

#include <vector>

#include "core/autograd.h"

namespace loom {

// The nodes reachable from `root`, in the order a backward visits them: each
// before every node it passes gradients to.
std::vector<Node*> backward_order(Node* root);

}  // namespace loom
