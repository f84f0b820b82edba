// File: core/cpu/conv.h
// 2-D convolution on the CPU (cross-correlation, as PyTorch and cuDNN compute
// it): im2col + GEMM forward, GEMM + col2im input gradient (dgrad), GEMM weight
// gradient (wgrad), and the bias gradient. The backward pass calls these
// explicitly; nothing is derived by running the forward "in reverse".
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output,
// G groups (C / G input and K / G output channels per group).
//
// Layout: every Strided here must be contiguous NCHW (row-major), float32 or
// float64, all one dtype. The conv2d op makes its inputs contiguous and
// allocates outputs that way; it also validates every size, so these kernels
// assume consistent shapes.
#pragma once

#include <cstdint>

#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cpu {

// Output length of one spatial dim:
//   (in + 2 pad - dilation (kernel - 1) - 1) / stride + 1, rounded down;
// 0 when the dilated filter does not fit the padded input.
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation);

// y (N, K, P, Q) = conv(x (N, C, H, W), w (K, C/G, R, S)) + bias (K), then
// max(y, 0) when `relu` (in the same pass, while an image's output is in cache).
// `bias` may be null (no bias).
void conv2d_forward(const Strided& y, const Strided& x, const Strided& w, const Strided* bias,
                    const kernel::ConvParams& params, bool relu = false);

// dx (N, C, H, W) = d loss / d x, from dy (N, K, P, Q) and w (K, C/G, R, S).
void conv2d_dgrad(const Strided& dx, const Strided& dy, const Strided& w, const kernel::ConvParams& params);

// dw (K, C/G, R, S) = d loss / d w, from dy (N, K, P, Q) and x (N, C, H, W).
void conv2d_wgrad(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& params);

// db (K) = sum of dy (N, K, P, Q) over N, P and Q.
void conv2d_bgrad(const Strided& db, const Strided& dy);

}  // namespace loom::cpu
