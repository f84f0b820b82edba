// File: core/ops/embedding.h
// Table lookup, as torch.nn.functional.embedding:
//
//   Tensor vectors = loom::embedding(table, tokens);  // table (V, D), tokens (B, T) -> (B, T, D)
//
// V rows (vocabulary), D features per row. The forward selects rows
// (index_select); the backward scatter-adds the output gradient into the rows
// that were read (repeated tokens accumulate), on the GPU with a CUDA kernel
// that adds atomically (core/cuda/indexing.cu).
#pragma once

#include "core/tensor.h"

namespace loom {

// weight (V, D) floating; indices of any shape, integers in [0, V) on the
// weight's device. Returns (indices' sizes..., D).
Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace loom
