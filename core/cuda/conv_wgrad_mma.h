// File: core/cuda/conv_wgrad_mma.h
// Weight gradient on tensor cores for narrow layers: 16 to 128 channels in and out, the CIFAR
// ResNets' and U-Nets' early layers. There cuDNN's wgrad GEMMs have an output of only K x C * R * S and
// a reduction of N * P * Q pixels, which they split over few blocks; this kernel stages each tile of
// output rows and its input window once in shared memory and runs mma.sync over every tap from there
// (conv_wgrad_mma.cu says how). bfloat16 and float16 operands multiply exactly; float32 ones are rounded to
// TF32 (so core/ops runs them only under the TF32 policy). Float32 accumulation, the same bits every run on
// one GPU model (a fixed-order two-stage sum, no float atomics); core/ops races it against cuDNN per shape.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#pragma once

#include "core/cuda/scratch.h"
#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cuda {

// True when the kernel takes these operands: x (N, C, H, W) and dy (N, K, P, Q) dense channels-last,
// 16-byte aligned, dw (K, C, R, S) any strides, all bfloat16, float16 or float32; C and K multiples of 16 up
// to 128, R, S <= 7, groups and dilation 1, and a tile of one output row fitting shared memory.
bool conv_wgrad_mma_supported(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p);

// The float32 scratch conv_wgrad_mma needs.
Scratch conv_wgrad_mma_scratch(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p);

// dw (K, C, R, S) = wgrad(dy (N, K, P, Q), x (N, C, H, W)); scratch as conv_wgrad_mma_scratch says.
void conv_wgrad_mma(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p,
                    const Strided& scratch);

}  // namespace loom::cuda
