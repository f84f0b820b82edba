// File: core/cudnn/conv.h
// 2-D convolution on the GPU through cached cuDNN graphs: one graph per
// direction (fprop, dgrad, wgrad), as the backward pass calls them explicitly.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
// Every tensor is a device tensor, dense NCHW or NHWC (dims always logical);
// groups are implied by C / (filter C).
#pragma once

#include <optional>

#include "core/cudnn/variant_pointers.h"
#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cudnn {

// Declared only: graph.h defines them with cuDNN types, which core/ops must not see.
class Graph;
enum class ConvDirection;

// What a call does while lazy mode still builds or restores its graph's plan
// in the background: run on cuDNN's legacy API meanwhile (Legacy), or run
// nothing and return false (Skip). A race against a Loom kernel (conv_small.cc)
// skips: the legacy API's first call on a key costs about 0.1 s, and what it
// would time is not what runs once the plan is swapped in, when the race runs
// again (kernel_choice.h). Returns whether the convolution ran.
enum class WhilePending { Legacy, Skip };

// y (N, K, P, Q) = conv(x (N, C, H, W), w (K, C/G, R, S)).
bool conv2d_forward(const Strided& y, const Strided& x, const Strided& w, const kernel::ConvParams& p,
                    WhilePending pending = WhilePending::Legacy);
// dx (N, C, H, W) from dy (N, K, P, Q) and w.
bool conv2d_dgrad(const Strided& dx, const Strided& dy, const Strided& w, const kernel::ConvParams& p,
                  WhilePending pending = WhilePending::Legacy);
// dw (K, C/G, R, S) from dy (N, K, P, Q) and x (N, C, H, W).
bool conv2d_wgrad(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p,
                  WhilePending pending = WhilePending::Legacy);
// y (N, K, P, Q) = relu(conv(x (N, C, H, W), w (K, C/G, R, S)) + b (K)); no add without b.
// One fused graph (fused.cc, beside the other fused patterns); false where no
// engine runs it.
bool conv2d_bias_relu_forward(const Strided& y, const Strided& x, const Strided& w,
                              const std::optional<Strided>& b, const kernel::ConvParams& p);

// The graph one of the calls above builds and its variant pack, for tests that
// run every engine config: (x, w, y) are (dx, w, dy) for dgrad, (x, dw, dy) for wgrad.
Graph conv2d_graph(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
                   const kernel::ConvParams& p);
VariantPointers conv_pointers(const Strided& x, const Strided& w, const Strided& y);

}  // namespace loom::cudnn
