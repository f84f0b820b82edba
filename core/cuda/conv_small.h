// File: core/cuda/conv_small.h
// Direct convolution for layers with few channels on one side: few input
// channels (C <= 8: a network's first layer on 1-channel or RGB images, and
// small second layers), where cuDNN's implicit GEMMs have a reduction of only
// C * R * S and spend their time on data movement, or few output channels
// (K <= 8 from up to 64: a segmentation head's 1x1 to a few classes), where
// most of a GEMM tile's K columns idle. These kernels stage the filter and each
// tile's input window in shared memory and compute each output straight from
// them.
// Forward: a thread computes up to 8 output channels of 4 pixels, then adds
// an optional bias and ReLU. Weight gradient: a deterministic two-stage
// reduction over N * P * Q (per-block partial sums in a fixed pixel order,
// then a fixed-order sum of the partials; no float atomics), which can also
// sum the bias gradient on the way. Data gradient at stride 1: the forward
// kernel on dy with the filter transposed and flipped (a strided dgrad is
// left to cuDNN).
//
// All arithmetic is float32 fused multiply-add (bfloat16 / float16 operands are
// widened on load and rounded once on store), so every numerics policy allows
// them, strict fp32 included.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
// Operands are 4-D with any strides, all of one dtype (float32, bfloat16 or
// float16); groups 1, dilation 1.
#pragma once

#include <optional>

#include "core/cuda/scratch.h"
#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cuda {

// True when the kernels take these operands: C <= 8 (or K <= 8 and C <= 64), R, S <= 7, groups and
// dilation 1, one float32 / bfloat16 / float16 dtype, and a filter small enough
// for one block (K * C * R * S <= 8192, and (K / KB) * ceil(C * R * S / 4) <= 256
// for KB the largest of 8, 4, 2, 1 that divides K).
bool conv_small_supported(const Strided& x, const Strided& w, const kernel::ConvParams& p);

// What conv_small_forward applies to each output: + bias (K, of the operands'
// dtype, any stride) where given, then ReLU when relu.
struct SmallConvEpilogue {
  std::optional<Strided> bias;
  bool relu = false;
};

// True when conv_small_forward takes this epilogue for a filter w (K, C, R, S).
bool conv_small_epilogue_supported(const SmallConvEpilogue& e, const Strided& w);

// y (N, K, P, Q) = conv(x (N, C, H, W), w (K, C, R, S)), then the epilogue.
void conv_small_forward(const Strided& y, const Strided& x, const Strided& w,
                        const kernel::ConvParams& p, const SmallConvEpilogue& epilogue = {});

// True when conv_small_dgrad takes these operands: the forward's dtypes and
// sizes for dy's K <= 8 channels (or dx's C <= 8 and dy's K <= 64), stride 1, dilation 1, groups 1,
// padding at most R - 1 and S - 1.
bool conv_small_dgrad_supported(const Strided& dy, const Strided& w, const kernel::ConvParams& p);
// dx (N, C, H, W) = dgrad(dy (N, K, P, Q), w (K, C, R, S)).
void conv_small_dgrad(const Strided& dx, const Strided& dy, const Strided& w, const kernel::ConvParams& p);

// The float32 scratch conv_small_wgrad needs (with or without db).
Scratch conv_small_wgrad_scratch(const Strided& dy, const Strided& dw);
// True when conv_small_wgrad also takes a db for a filter (K, C, R, S): K at
// most its block's threads (every K <= 128 is).
bool conv_small_wgrad_takes_bias(const Strided& w_or_dw);
// dw (K, C, R, S) = wgrad(dy (N, K, P, Q), x (N, C, H, W)), and where given
// db (K, of dw's dtype, any stride) = the sum of dy over N, P, Q; scratch is
// as conv_small_wgrad_scratch says.
void conv_small_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                      const kernel::ConvParams& p, const Strided& scratch,
                      const std::optional<Strided>& db = std::nullopt);

}  // namespace loom::cuda
