// File: core/onednn/conv.h
// 2-D convolution on oneDNN: forward (bias and an optional ReLU in the same
// primitive), data gradient, and weight gradient with the bias gradient, for
// grouped, depthwise, strided and dilated convolutions; conv_transpose2d runs
// on the same calls (its forward is a dgrad).
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output,
// G groups.
//
// Operands are float32; activations (x, y, dx, dy) are dense, all in one of
// NCHW and NHWC; w / dw (K, C/G, R, S) dense in either. Channels-last
// activations are computed in place: oneDNN's NHWC kernels were its fastest on
// every shape measured (single thread, batch 8, ResNet and MobileNetV2 layers:
// 0-15% ahead of its blocked nChw16c kernels with their reorders on dense
// convolutions, 2-5x on depthwise ones), except for the data gradients where
// its NHWC kernel falls off a cliff (conv.cc: dgrad_runs_blocked). NCHW
// activations go through the blocked layouts oneDNN picks, reordered in and
// out: that beat reordering them to NHWC by 5-60% (depthwise 2-3x), and its
// NCHW kernels (a GEMM) by 4-10x.
// The weights are always reordered, into the primitive's blocked layout. Each
// call returns false, having written nothing, when the tier is off or oneDNN
// has no fast implementation; the caller then runs the reference kernel.
#pragma once

#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::onednn {

// y (N, K, P, Q) = conv(x (N, C, H, W), w) + bias (K; may be null), then max(y, 0) when relu.
bool conv2d_forward(const Strided& y, const Strided& x, const Strided& w, const Strided* bias,
                    const kernel::ConvParams& p, bool relu = false);

// dx (N, C, H, W) from dy (N, K, P, Q) and w.
bool conv2d_dgrad(const Strided& dx, const Strided& dy, const Strided& w, const kernel::ConvParams& p);

// dw (K, C/G, R, S) from dy and x, and db (K) = the sum of dy over N, P, Q
// when db is not null, in one primitive.
bool conv2d_wgrad(const Strided& dw, const Strided* db, const Strided& dy, const Strided& x,
                  const kernel::ConvParams& p);

}  // namespace loom::onednn
