// File: core/cuda/conv_small.h
// Direct convolution for layers with few input channels (C <= 4: a network's
// first layer on 1-channel or RGB images). There, cuDNN's implicit GEMMs have a
// reduction of only C * R * S (9 to 100) and spend their time on data movement;
// these kernels keep the whole filter in shared memory and compute each output
// straight from the input. Forward: a thread computes up to 8 output channels
// of one pixel. Weight gradient: a deterministic two-stage reduction over
// N * P * Q (per-block partial sums in a fixed pixel order, then a fixed-order
// sum of the partials; no float atomics). There is no dgrad: a first layer's
// input needs no gradient (cuDNN computes it where one is needed).
//
// All arithmetic is float32 fused multiply-add (bfloat16 / float16 operands are
// widened on load and rounded once on store), so every numerics policy allows
// them, strict fp32 included.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
// Operands are 4-D with any strides, all of one dtype (float32, bfloat16 or
// float16); groups 1, dilation 1.
#pragma once

#include "core/cpu/conv.h"  // ConvParams
#include "core/strided.h"

namespace loom::cuda {

// True when the kernels take these operands: C <= 4, R, S <= 7, groups and
// dilation 1, one float32 / bfloat16 / float16 dtype, and a filter small enough
// for one block (K * C * R * S <= 2048 when 8 divides K, fewer otherwise).
bool conv_small_supported(const Strided& x, const Strided& w, const cpu::ConvParams& p);

// y (N, K, P, Q) = conv(x (N, C, H, W), w (K, C, R, S)).
void conv_small_forward(const Strided& y, const Strided& x, const Strided& w,
                        const cpu::ConvParams& p);

// Float32 scratch elements conv_small_wgrad needs.
int64_t conv_small_wgrad_scratch(const Strided& dy, const Strided& dw);
// dw (K, C, R, S) = wgrad(dy (N, K, P, Q), x (N, C, H, W)); scratch is float32
// with conv_small_wgrad_scratch elements.
void conv_small_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                      const cpu::ConvParams& p, const Strided& scratch);

}  // namespace loom::cuda
