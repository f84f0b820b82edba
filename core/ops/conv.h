// File: core/ops/conv.h
// 2-D convolution (cross-correlation, as torch.nn.functional.conv2d).
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
//
//   auto y = loom::conv2d(x, weight, bias, {.stride = 2, .padding = 1});
//   // x (N, C, H, W), weight (K, C/groups, R, S), bias (K) -> y (N, K, P, Q)
//   // P = (H + 2 padding - dilation (R - 1) - 1) / stride + 1, rounded down
#pragma once

#include <cstdint>

#include "core/size2.h"
#include "core/tensor.h"

namespace loom {

// {height, width} pairs, as PyTorch's conv2d arguments, for the functional ops
// (conv2d, the fused conv ops, fusion::Block::conv2d). The layer's own settings
// (whether it owns a bias, the generator of its initial weights) live in
// nn::Conv2dOptions (layers/conv.h): a functional op takes its bias as a tensor
// and draws nothing.
struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;  // zeros on both sides
  Size2 dilation = 1;
  int64_t groups = 1;  // C and K split into this many independent convolutions
};

// x (N, C, H, W) with any strides, weight (K, C/groups, R, S), optional bias
// (K); float32/float64 of one dtype (bfloat16/float16 too on the GPU; under
// AutocastGuard, CUDA operands are cast to the autocast dtype first). The
// output is (N, K, P, Q), channels-last when x or weight is channels-last (as
// PyTorch decides with suggest_memory_format), or on the GPU when neither says
// (a one-channel image and its filter), else contiguous NCHW.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Conv2dOptions options = {});

}  // namespace loom
