// File: core/cudnn/conv_legacy.h
// Convolution through cuDNN's legacy API (cudnnConvolutionForward /
// BackwardData / BackwardFilter): the tier below the graph API for a conv key
// no graph engine takes. It has kernels of its own, chosen by
// cudnnGet*Algorithm_v7 and filtered by the same numerics policy (strict fp32:
// FMA math and no Winograd; deterministic: deterministic algorithms only);
// the choice is cached per key. And one algorithm on its own: the non-fused
// Winograd kernels, which conv.cc races against the graph plan of a backward
// convolution under strict fp32.
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

// The legacy API's non-fused Winograd algorithm (FMA math) for a BackwardData
// or BackwardFilter convolution of fp32 data, in NCHW copies where the tensors
// are laid out otherwise (it takes NCHW only); arguments as conv2d_legacy's.
// Its error grows with the sum it computes: on resnet9's shapes it was 1e-5 to
// 6e-5 of the largest value (the FMA kernels' 2e-7 to 3e-6, TF32's ~1e-3), so
// it is admitted only where the sum is short enough to stay within strict
// fp32's gradient tolerance, 1e-4 (winograd_admitted).
// Returns "" when it ran, else why it could not.
std::string conv2d_winograd(ConvDirection direction, const Strided& x, const Strided& w,
                            const Strided& y, const kernel::ConvParams& p);

// Whether conv2d_winograd may run this convolution under the current policy:
// strict fp32 and not deterministic (a deterministic policy keeps the
// heuristics' choice, so that two runs pick the same kernels; a race's winner
// may differ from run to run), fp32 data, a backward direction, groups 1, a 3x3
// filter, and a sum no longer than the direction's bound. The bounds were measured
// on 3x3 filters only: a 5x5 wgrad of N P Q = 4,446 (x (13,4,18,19), w (30,4,5,5),
// padding 2) was 4.7e-4 of the largest value off, beyond the tolerance (H200).
// wgrad's error grew about as the square root of N P Q (1e-5 at 2,048, 6e-5
// at 131,072, 7.2e-5 at 262,144); dgrad's stayed at 1e-5 to 3e-5 up to
// K R S = 16,380 (H200, cuDNN 9.19). The bounds are where
// tests/core/cudnn/conv_legacy_gpu_test.cc checks that it stays within 1e-4.
bool winograd_admitted(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y);
inline constexpr int64_t kWinogradMaxDgradSum = int64_t{1} << 14;  // K R S
inline constexpr int64_t kWinogradMaxWgradSum = int64_t{1} << 18;  // N P Q

}  // namespace loom::cudnn
