// File: core/cuda/conv_small_kernels.h
// Launchers for the small-channel convolution kernels in conv_small.cu (see
// conv_small.h). They return the launch status; conv_small.cc checks it.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cuda {

// y (N, K, P, Q) = conv(x (N, C, H, W), w (K, C, R, S)) + bias (K) where
// bias is not null, then ReLU when relu.
cudaError_t launch_conv_small_forward(const Strided& y, const Strided& x, const Strided& w,
                                      const Strided* bias, bool relu, const kernel::ConvParams& p,
                                      cudaStream_t stream);
// dw (K, C, R, S) = sum over N, P, Q of dy (N, K, P, Q) times x's window
// element, and db (K) = sum of dy over N, P, Q where db is not null (then
// K <= conv_small_wgrad_threads); partials is float32 scratch of
// conv_small_wgrad_partials elements.
cudaError_t launch_conv_small_wgrad(const Strided& dw, const Strided* db, const Strided& dy,
                                    const Strided& x, const kernel::ConvParams& p, float* partials,
                                    cudaStream_t stream);
// dx (N, C, H, W) = dgrad(dy (N, K, P, Q), w (K, C, R, S)) at stride 1,
// dilation 1 and padding at most R - 1, S - 1, by the forward kernel.
cudaError_t launch_conv_small_dgrad(const Strided& dx, const Strided& dy, const Strided& w,
                                    const kernel::ConvParams& p, cudaStream_t stream);
// True when the forward kernel takes a filter (K, C, R, S) at column stride
// stride_w: its channel groups in one block, the filter in shared memory, and
// the filter beside the smallest tile's input window.
bool conv_small_forward_fits(int64_t K, int64_t C, int64_t R, int64_t S, int64_t stride_w);
// True when a filter (K, C, R, S) at column stride stride_w fits the kernels'
// blocks: the weight gradient's thread per (tap group, channel group) in one
// block, its pixel tile, and the forward's filter beside its smallest input
// window in shared memory.
bool conv_small_fits(int64_t K, int64_t C, int64_t R, int64_t S, int64_t stride_w);
// The threads of a weight-gradient block for a filter (K, C, R, S).
int conv_small_wgrad_threads(const Strided& w_or_dw);
// The number of float32 partial sums the wgrad's first stage writes.
int64_t conv_small_wgrad_partials(const Strided& dy, const Strided& w_or_dw);

}  // namespace loom::cuda
