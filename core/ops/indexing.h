// File: core/ops/indexing.h
// Reading along one dim at integer indices, as torch.gather and
// torch.index_select, differentiable in the indexed tensor (the backward
// scatter-adds: repeated indices accumulate):
//
//   Tensor rows = index_select(table, 0, ids);            // table (V, D), ids (K,) -> (K, D)
//   Tensor picked = gather(logits, 1, y.unsqueeze(1));    // (B, C), (B, 1) -> (B, 1)
//
// Indices are int64 (other integer dtypes are converted) on the tensor's
// device and must lie in [0, size) of the indexed dim: IndexError otherwise,
// naming the first bad one. On the GPU that check reads the indices back to
// the host, except while a CUDA graph is being captured (then it is skipped,
// and out-of-range indices are the caller's bug, as in a raw CUDA kernel).
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace loom {

// out[i][j][k] = x[index[i][j][k]][j][k] for dim 0 (likewise for other dims).
// index has x's number of dims and index.size(d) <= x.size(d) for d != dim;
// out has index's sizes and x's dtype (any dtype; the gradient needs a floating one).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// The slices x.select(dim, index[k]) stacked along dim: index is 1-D (K,);
// out has x's sizes with K at dim.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

// Class indices (any shape, int64) as one-hot int64 rows, as torch.nn.functional.one_hot:
// out has indices' sizes and a last dim of num_classes (by default the largest
// index + 1), with out[..., c] = 1 where indices[...] == c. Indices outside
// [0, num_classes) are an IndexError: the check reads them back from the
// device, except inside a CUDA-graph capture (as for gather), where
// num_classes must be given.
//   Tensor targets = one_hot(labels, 10).to(DType::Float32);  // (N) -> (N, 10)
Tensor one_hot(const Tensor& indices, std::optional<int64_t> num_classes = std::nullopt);

}  // namespace loom
