// File: core/ops/linalg.h
// Matrix products: matmul with torch.matmul's rank rules and batch
// broadcasting, and the fully connected layer's linear. Operands may have any
// strides (transposed views are used without a copy); outputs are contiguous.
//
//   auto y = loom::linear(x, weight, bias);        // x (B, in) -> y (B, out)
//   auto s = loom::matmul(q, k.transpose(-2, -1));  // (B, T, D) . (B, D, T)
#pragma once

#include "core/tensor.h"

namespace loom {

// torch.matmul:
//   (K) . (K)                    -> ()        dot product
//   (M, K) . (K, N)              -> (M, N)
//   (K) . (K, N)                 -> (N)       the vector is a row, then dropped
//   (M, K) . (K)                 -> (M)       the vector is a column, then dropped
//   (..., M, K) . (..., K, N)    -> (broadcast(...), M, N), either side may be 1-D or 2-D
// Both operands float32/float64 of one dtype (bfloat16/float16 too on the GPU;
// under AutocastGuard, CUDA operands of matmul and linear are cast to the
// autocast dtype first).
Tensor matmul(const Tensor& a, const Tensor& b);

// torch.nn.functional.linear: y = x . weight^T + bias.
// x (*, in), weight (out, in), bias (out) or undefined -> y (*, out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace loom
