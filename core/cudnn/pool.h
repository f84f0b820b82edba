// File: core/cudnn/pool.h
// Max and average pooling through cuDNN RESAMPLE graphs, following each
// layout's contract (cudnn-graph-api.md): NCHW engines come only from the
// FALLBACK heuristics and their backward needs X, Y and dY; NHWC max pooling
// records an int8 index tensor in the forward pass and its backward uses it.
//
// N batch, C channels, H, W input, P, Q output. Tensors are dense NCHW or NHWC.
#pragma once

#include "core/cudnn/variant_pointers.h"
#include "core/kernel/pool.h"
#include "core/strided.h"

namespace loom::cudnn {

// Declared only: graph.h defines it with cuDNN types, which core/ops must not see.
class Graph;

// False when cuDNN cannot compute PyTorch's result for these arguments (an
// average-pool divisor cuDNN counts differently, or no engine): the caller
// then uses the CUDA kernel. `index` is the NHWC max-pool index (int8, y's
// shape) or null.
bool pool2d_forward(const Strided& y, const Strided* index, const Strided& x, const kernel::Pool2dParams& params);

// dx from dy plus what the layout's contract needs: x and y (NCHW) or index (NHWC max).
struct PoolBackwardInputs {
  const Strided* x = nullptr;
  const Strided* y = nullptr;
  const Strided* index = nullptr;
};
bool pool2d_backward(const Strided& dx, const Strided& dy, const PoolBackwardInputs& saved,
                     const kernel::Pool2dParams& params);

// The graphs behind the two calls and their variant packs, for tests that run
// every engine config cuDNN offers.
Graph pool2d_forward_graph(const Strided& y, const Strided* index, const Strided& x,
                          const kernel::Pool2dParams& params);
VariantPointers pool2d_forward_pointers(const Strided& y, const Strided* index, const Strided& x);
Graph pool2d_backward_graph(const Strided& dx, const Strided& dy, const PoolBackwardInputs& saved,
                           const kernel::Pool2dParams& params);
VariantPointers pool2d_backward_pointers(const Strided& dx, const Strided& dy,
                                         const PoolBackwardInputs& saved);

// True when x's layout uses an index tensor for max pooling (NHWC).
bool pool_uses_index(const Strided& x);

}  // namespace loom::cudnn
