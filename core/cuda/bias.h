// File: core/cuda/bias.h
// Per-channel bias add and bias gradient for conv and linear layers on dense
// NCHW or channels-last (N, C, H, W) and on (N, C) tensors: memory-bound
// kernels that replace the generic broadcast add and reduction there. Work is
// queued on cuda::current_stream(); nothing synchronises the host, so both can
// be captured in a CUDA graph.
//
// N batch, C channels, H, W spatial (any number of trailing dims, or none).
#pragma once

#include "core/strided.h"

namespace loom::cuda {

// True when t has at least 2 dims and is dense in row-major (NCHW, (N, C)) or
// channels-last order: what the two functions below take.
bool is_channel_dense(const Strided& t);

// y (N, C, ...) += bias (C), in place. y: float32, float64, bfloat16 or float16,
// is_channel_dense; bias: 1-D of C, any stride, float32 or y's dtype. 16-bit y
// adds in float32 and rounds once.
void add_channel_bias(const Strided& y, const Strided& bias);

// db (C) = the sum of dy (N, C, ...) over every dim but 1. dy as y above; db:
// 1-D of C, any stride, float32 or dy's dtype. Sums in float32 (float64 for
// float64) in an order fixed by dy's shape and layout, so equal inputs give the
// same bits on every run. Scratch comes from the caching allocator.
void channel_sum(const Strided& db, const Strided& dy);

// g = dy where y > 0, else 0 (the gradient through a ReLU whose output is y),
// and db = channel_sum of g, in one pass over dy. g, dy and y have one dtype and
// the same sizes and strides (dy as above); db as above.
void relu_grad_sum(const Strided& g, const Strided& db, const Strided& dy, const Strided& y);

}  // namespace loom::cuda
