// File: core/cuda/bias_kernels.h
// Launchers for the per-channel bias kernels in bias.cu: the bias add of a conv
// or linear layer and its gradient, on dense NCHW or channels-last operands.
// They return the launch status; core/cuda/bias.cc checks it.
//
// N batch, C channels, H, W spatial (any number of trailing dims, or none).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "core/strided.h"

namespace loom::cuda {

// A dense (N, C, ...) operand seen as (outer, C, inner): element i has channel
// (i / inner) % C in memory order. inner = H * W for NCHW, 1 for channels-last
// and for (N, C).
struct ChannelLayout {
  int64_t channels = 0;
  int64_t inner = 1;
};

// The layout of t when it has at least 2 dims and is dense in row-major (NCHW)
// or channels-last order (dim 1 innermost), else nullopt. Strides of size-1
// dims do not matter.
std::optional<ChannelLayout> channel_layout(const Strided& t);

// y (N, C, ...) += bias (C) broadcast over every dim but 1. y dense (see
// channel_layout) in float32, float64, bfloat16 or float16; bias 1-D with any
// stride, float32 or y's dtype.
cudaError_t launch_add_channel_bias(const Strided& y, const Strided& bias, cudaStream_t stream);

// db (C) = sum of dy (N, C, ...) over every dim but 1, in a fixed order, summed
// in float32 (float64 for float64). `scratch` holds
// channel_sum_scratch_bytes(dy) bytes (nullptr when that is 0).
cudaError_t launch_channel_sum(const Strided& db, const Strided& dy, void* scratch,
                               cudaStream_t stream);
size_t channel_sum_scratch_bytes(const Strided& dy);

// g = dy where y > 0, else 0 (a ReLU's input gradient from its output y), and
// db = the sum of g as launch_channel_sum gives it, in the same pass. g, dy and
// y: one dtype, the same sizes and strides; scratch as for launch_channel_sum.
cudaError_t launch_relu_grad_sum(const Strided& g, const Strided& db, const Strided& dy,
                                 const Strided& y, void* scratch, cudaStream_t stream);

}  // namespace loom::cuda
