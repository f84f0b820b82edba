// File: core/ops/conv_transpose.h
// 2-D transposed convolution, as torch.nn.functional.conv_transpose2d: the
// gradient of conv2d with respect to its input, used as a layer (decoders,
// learned upsampling).
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
//
//   auto y = loom::conv_transpose2d(x, weight, bias, {.stride = 2, .padding = 1,
//                                                     .output_padding = 1});
//   // x (N, C, H, W), weight (C, K/groups, R, S), bias (K) -> y (N, K, P, Q)
//   // P = (H - 1) stride - 2 padding + dilation (R - 1) + output_padding + 1
//
// It runs on the convolution kernels with the roles swapped: the forward is
// conv2d's dgrad, the input's gradient is conv2d's forward, and the weight's
// gradient is conv2d's wgrad with the input and the output gradient exchanged;
// so the GPU path is the same cuDNN graphs (and legacy-API tier) as conv2d's.
#pragma once

#include <cstdint>

#include "core/size2.h"
#include "core/tensor.h"

namespace loom {

// The functional op's geometry; the layer's own settings (bias, generator) live
// in nn::ConvTranspose2dOptions (layers/conv_transpose.h).
struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;         // removed from both sides of the output
  Size2 output_padding = 0;  // added to one side, to pick among the output sizes a stride allows
  Size2 dilation = 1;
  int64_t groups = 1;
};

// x (N, C, H, W) with any strides, weight (C, K/groups, R, S), optional bias
// (K); one floating dtype. The output's layout follows conv2d's rule.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        ConvTranspose2dOptions options = {});

}  // namespace loom
