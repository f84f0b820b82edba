// File: core/ops/conv_small_internal.h
// Loom's convolution tiers beside cuDNN: the small-channel kernels
// (core/cuda/conv_small.h, for layers with C <= 8, or K <= 8 from C <= 64: forward, stride-1 data
// gradient, weight and bias gradients), the depthwise kernels
// (core/cuda/conv_depthwise.h: groups == C == K) and the tensor-core weight
// gradient (core/cuda/conv_wgrad_mma.h). Per shape, the first call races a
// tier with cuDNN by KernelChoice and the faster runs from then on.
// LOOM_CONV_SMALL / LOOM_CONV_DEPTHWISE / LOOM_CONV_WGRAD_MMA = loom|cudnn
// forces one, auto (the default) races them. Private to core/ops.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#pragma once

#include "core/cpu/conv.h"
#include "core/tensor.h"

namespace loom::conv_detail {

// y (N, K, P, Q) = conv(x, w) by the small-channel kernel, returning true, when
// it takes these CUDA operands and is the choice for their shape; false leaves
// y to cuDNN.
bool small_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const kernel::ConvParams& p);
// y = relu(conv(x, w) + b) (no bias where b is undefined) likewise, against
// cuDNN's fused conv-bias-ReLU graph.
bool small_conv_bias_relu_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                                  const kernel::ConvParams& p);
// dx (N, C, H, W) = dgrad(dy, w) likewise (stride 1 only), against cuDNN's dgrad.
bool small_conv_dgrad(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p);
// dw (K, C, R, S) = wgrad(dy, x) likewise, and where db is defined also
// db (K) = the sum of dy over N, P, Q in the same kernels, against cuDNN's
// wgrad and Loom's channel sum.
bool small_conv_wgrad(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p,
                      const Tensor& db = Tensor());

// The depthwise tier likewise (groups == C == K, square filters of side 1, 3,
// 5 or 7): y = conv(x, w), dx = dgrad(dy, w), dw = wgrad(dy, x), each
// returning false to leave the pass to cuDNN.
bool depthwise_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const kernel::ConvParams& p);
bool depthwise_conv_dgrad(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p);
bool depthwise_conv_wgrad(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p);

// dw = wgrad(dy, x) by the tensor-core kernel (core/cuda/conv_wgrad_mma.h: channels-last layers of 16 to
// 128 channels, 16-bit, or float32 under the TF32 policy) likewise, against cuDNN's wgrad.
bool mma_conv_wgrad(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p);

// Convolutions over non-overlapping patches (filter == stride, at least 2 in
// area, no padding or dilation, one group; x or dx and y or dy dense
// channels-last): a ViT's patch embedding, a U-Net's 2x2 stride-2 transposed
// convolution (whose output is this tier's dgrad). Each is one matrix product
// over the patches' pixels taken as rows, beside a rearranging copy; raced
// against cuDNN's strided kernels (LOOM_CONV_PATCH = loom|cudnn|auto).
bool patch_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const kernel::ConvParams& p);
bool patch_conv_dgrad(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p);
bool patch_conv_wgrad(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p);

}  // namespace loom::conv_detail
