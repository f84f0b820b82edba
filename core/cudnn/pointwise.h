// File: core/cudnn/pointwise.h
// ReLU forward and backward as cuDNN pointwise graphs. cuDNN 9.19 has no
// engine for 4-D NCHW pointwise graphs, but elementwise math does not care about
// shape: operands that share one dense layout are viewed as a packed NHWC
// (n / 64, 64, 1, 1) tensor. Where that view or an engine is missing, these
// return false and the caller runs the CUDA kernel.
#pragma once

#include <optional>

#include "core/cudnn/graph.h"
#include "core/cudnn/plan.h"
#include "core/strided.h"

namespace loom::cudnn {

// y = max(x, 0). x and y dense with identical strides.
bool relu_forward(const Strided& y, const Strided& x);
// dx = dy where y > 0, else 0 (y > 0 exactly where x > 0). All three share strides.
bool relu_backward(const Strided& dx, const Strided& dy, const Strided& y);

// The graphs behind the two calls (none where the packed view does not apply)
// and their variant packs, for tests that run every engine config.
std::optional<Graph> relu_forward_graph(const Strided& y, const Strided& x);
VariantPointers relu_forward_pointers(const Strided& y, const Strided& x);
std::optional<Graph> relu_backward_graph(const Strided& dx, const Strided& dy, const Strided& y);
VariantPointers relu_backward_pointers(const Strided& dx, const Strided& dy, const Strided& y);

}  // namespace loom::cudnn
