// File: core/ops/attention.h
// Scaled dot-product attention, torch.nn.functional.scaled_dot_product_attention
// without a mask or dropout:
//
//   y = softmax(q k^T * scale) v,   scale = 1 / sqrt(E) unless given
//
// q (..., L, E), k (..., S, E), v (..., S, F) -> y (..., L, F); the leading dims
// are equal for all three (no broadcasting). Float32 and float64 (bfloat16 and
// float16 too on the GPU; under AutocastGuard, CUDA operands are cast to the
// autocast dtype first, as PyTorch's autocast casts them).
//
// On the GPU, 3-d and 4-d attentions whose operands fit in one block's shared
// memory (core/kernel/attention.h: in float32 up to about L = S = 60 at
// E = F = 64, or 95 at E = F = 16) run as one kernel forward and one backward,
// computing in float32 (float64 for float64) without rounding the scores to a
// 16-bit dtype; the others, and the CPU, run matmul, softmax and matmul. A 4-d
// y (N, H, L, F) is laid out as (N, L, H, F) in memory, as PyTorch's fused
// kernels lay it out, so that y.transpose(1, 2).reshape({N, L, H * F}) is a view.
//
//   Tensor y = loom::scaled_dot_product_attention(q, k, v);  // (N, H, L, E), (N, H, S, E), (N, H, S, F)
#pragma once

#include <optional>

#include "core/tensor.h"

namespace loom {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    std::optional<double> scale = std::nullopt);

}  // namespace loom
