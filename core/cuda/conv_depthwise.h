// File: core/cuda/conv_depthwise.h
// Direct kernels for depthwise convolutions (groups == C == K: one R x S filter
// per channel, MobileNet's middle layer). Each output needs only R * S products,
// so the layer is bound by memory traffic, and cuDNN offers it little: in NHWC
// its data and weight gradients exist only as legacy algorithms on NCHW copies.
// These kernels read any strides and walk the output in its own memory order
// (channels innermost for channels-last), so neighbouring threads touch
// neighbouring elements in either layout.
//
// Forward and data gradient: a thread per output (input) element sums its
// window; on channels-last operands in 16-byte channel packs, a thread sums V
// channels of up to 4 neighbouring columns, with the filter staged tap-major in
// shared memory. Weight gradient: a deterministic two-stage reduction over N * P * Q
// (per-block partial sums over a fixed slice of pixels, reduced in a fixed
// order, then a fixed-order sum of the blocks' partials; no float atomics).
// Arithmetic is float32 for float32 / bfloat16 / float16 operands (16-bit ones
// widened on load and rounded once on store) and float64 for float64, so every
// numerics policy allows them, strict fp32 included.
//
// N batch, C channels, H, W input, R, S filter, P, Q output.
#pragma once


#include "core/cuda/scratch.h"
#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cuda {

// True when the kernels take these operands: x (N, C, H, W) and w (C, 1, R, S)
// of one floating dtype, groups == C, a square filter of side 1, 3, 5 or 7,
// any stride, padding and dilation.
bool conv_depthwise_supported(const Strided& x, const Strided& w, const kernel::ConvParams& p);

// y (N, C, P, Q) = depthwise conv(x (N, C, H, W), w (C, 1, R, S)).
void conv_depthwise_forward(const Strided& y, const Strided& x, const Strided& w,
                            const kernel::ConvParams& p);
// dx (N, C, H, W) = its data gradient from dy (N, C, P, Q).
void conv_depthwise_dgrad(const Strided& dx, const Strided& dy, const Strided& w,
                          const kernel::ConvParams& p);

// The weight gradient's scratch: float64 for float64 operands, float32
// otherwise.
Scratch conv_depthwise_wgrad_scratch(const Strided& dy, const Strided& dw);
// dw (C, 1, R, S) = wgrad(dy (N, C, P, Q), x (N, C, H, W)); scratch as
// conv_depthwise_wgrad_scratch says.
void conv_depthwise_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                          const kernel::ConvParams& p, const Strided& scratch);

}  // namespace loom::cuda
