// File: core/ops/conv.h
// 1-D and 2-D convolution (cross-correlation, as torch.nn.functional.conv1d
// and conv2d).
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
//
//   auto y = loom::conv2d(x, weight, bias, {.stride = 2, .padding = 1});
//   // x (N, C, H, W), weight (K, C/groups, R, S), bias (K) -> y (N, K, P, Q)
//   // P = (H + 2 padding - dilation (R - 1) - 1) / stride + 1, rounded down
//   auto z = loom::conv1d(signal, taps, {}, {.padding = 2});
//   // signal (N, C, L), taps (K, C/groups, R) -> z (N, K, L'), L' as P with L for H
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

// conv1d's settings, as PyTorch's conv1d arguments (single ints).
struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;  // zeros on both ends
  int64_t dilation = 1;
  int64_t groups = 1;
};

// x (N, C, L), or one sample (C, L), with any strides; weight (K, C/groups, R);
// optional bias (K): conv2d over the view x (N, C, 1, L) with weight (K,
// C/groups, 1, R), so the dtypes, devices, autocast and gradients are conv2d's.
// The output is (N, K, L') (or (K, L')), contiguous unless x is length-major
// (x's stride(-2) is 1, as x (N, L, C) transposed), which gives y of that
// layout as conv2d's channels-last does.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Conv1dOptions options = {});

}  // namespace loom
