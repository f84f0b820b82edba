// File: core/cudnn/conv_legacy.h
// Convolution through cuDNN's legacy API (cudnnConvolutionForward /
// BackwardData / BackwardFilter): the tier below the graph API for a conv key
// no graph engine takes. It has kernels of its own, chosen by
// cudnnGet*Algorithm_v7 and filtered by the same numerics policy (strict fp32:
// FMA math and no Winograd; deterministic: deterministic algorithms only);
// the choice is cached per key.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
// Tensors as in conv.h: dense NCHW or NHWC device tensors, groups = C / filter C.
#pragma once

#include <string>

#include "core/cudnn/graph.h"
#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cudnn {

// (x, w, y) are (dx, w, dy) for BackwardData and (x, dw, dy) for BackwardFilter.
// Returns "" when it ran, else why no legacy algorithm could (for the error
// that names every tier tried).
std::string conv2d_legacy(ConvDirection direction, const Strided& x, const Strided& w,
                          const Strided& y, const kernel::ConvParams& p);

}  // namespace loom::cudnn
