// File: core/cudnn/pointwise.h
// Elementwise activations forward and backward as cuDNN pointwise graphs (any
// *_FWD mode and its *_BWD mode; core/kernel/activation.h says which
// activation has which). cuDNN 9.19 has no engine for 4-D NCHW pointwise graphs, but
// elementwise math does not care about shape: operands that share one dense
// layout are viewed as a packed NHWC (n / 64, 64, 1, 1) tensor. Where that view
// or an engine is missing, these return false and the caller runs the CUDA kernel.
#pragma once

#include <optional>

#include "core/cudnn/activation.h"
#include "core/cudnn/graph.h"
#include "core/cudnn/plan.h"
#include "core/kernel/activation.h"
#include "core/strided.h"

namespace loom::cudnn {

// A pointwise mode and its scalar attributes (ReLU's lower slope and clips,
// ELU's alpha, softplus and swish beta; none: cuDNN's defaults; see graph.h).
struct PointwiseMode {
  cudnnPointwiseMode_t mode;
  PointwiseScalars scalars;
};

// y = mode(x). x and y dense with identical strides.
bool pointwise_forward(PointwiseMode mode, const Strided& y, const Strided& x);
// dx = mode(dy [+ dy_addend], saved), a *_BWD mode: saved is the forward's input (ReLU may
// take its output: same sign). All share strides.
bool pointwise_backward(PointwiseMode mode, const Strided& dx, const Strided& dy, const Strided& saved,
                        const std::optional<Strided>& dy_addend = std::nullopt);

// An activation row (core/kernel/activation.h) as a pointwise graph: its
// cuDNN forward or backward mode with its scalars (the row's, defaults filled
// in); none where the row has none. activation.h runs it.
std::optional<PointwiseMode> activation_mode(kernel::ActivationKind kind, bool backward,
                                             const kernel::ActivationParameters& parameters);

// The graphs behind the calls (none where the packed view does not apply) and
// their variant packs, for tests that run every engine config.
std::optional<Graph> pointwise_forward_graph(PointwiseMode mode, const Strided& y, const Strided& x);
VariantPointers pointwise_forward_pointers(const Strided& y, const Strided& x);
std::optional<Graph> pointwise_backward_graph(PointwiseMode mode, const Strided& dx, const Strided& dy,
                                              const Strided& saved,
                                              const std::optional<Strided>& dy_addend = std::nullopt);
VariantPointers pointwise_backward_pointers(const Strided& dx, const Strided& dy, const Strided& saved,
                                            const std::optional<Strided>& dy_addend = std::nullopt);

}  // namespace loom::cudnn
