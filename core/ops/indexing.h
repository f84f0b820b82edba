// File: core/ops/indexing.h
// Reading along one dim at integer indices, as torch.gather and
// torch.index_select, differentiable in the indexed tensor (the backward
// scatter-adds: repeated indices accumulate); writing and adding there, as
// torch.scatter, scatter_add and index_add; counting, as torch.bincount; and
// picking by a mask, as torch.masked_select, nonzero and argwhere:
//
//   Tensor rows = index_select(table, 0, ids);            // table (V, D), ids (K,) -> (K, D)
//   Tensor picked = gather(logits, 1, y.unsqueeze(1));    // (B, C), (B, 1) -> (B, 1)
//   Tensor confusion = bincount(y * C + pred, {}, C * C).reshape({C, C});  // int64 (C, C)
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

// x's copy with src added at index along dim, as torch.scatter_add: out[index[i][j]][j]
// += src[i][j] for dim 0 (likewise for other dims); repeated indices accumulate.
// index, src and x have one number of dims, index.size(d) <= src.size(d) for
// every d and <= x.size(d) for d != dim; only src's first index.sizes()
// elements are read (index and src do not broadcast). An empty index gives x's
// copy, unchecked, as PyTorch. x and src share a dtype: float32, float64, int32
// or int64 (integers wrap around), and bfloat16 / float16 on the GPU; uint8 and
// Bool are a TypeError (no 8-bit atomicAdd on the GPU: convert to int32). On the
// GPU a float sum's order, and so its last bits, may vary from run to run.
// Gradients: dy to x, dy gathered at index to src (zeros past index's sizes).
//   Tensor sums = scatter_add(zeros({B, S}), 1, segment_ids, values);  // (B, N) -> per-segment sums
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// x's copy with src (or `value`, cast to x's dtype) written at index along dim,
// as torch.scatter without reduce: out[index[i][j]][j] = src[i][j] for dim 0.
// Shapes and checks as scatter_add; any dtype. Repeated indices: PyTorch leaves
// the result unspecified. Here the CPU keeps the value written last in the
// index's row-major order; on the GPU which one stays is unspecified (the
// writes race), so GPU and CPU agree only where the indices are unique.
// Gradients, as PyTorch's: dy with the written places zeroed to x, dy gathered
// at index to src (every one of repeated indices gets it, the lost writes too).
//   Tensor targets = scatter(zeros({N, C}), 1, labels.unsqueeze(1), 1.0);  // one-hot rows
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value);

// x's copy with alpha * source.select(dim, k) added to the slice
// x.select(dim, index[k]) for every k, as torch.index_add: index is 1-D (K,)
// (or 0-d); source has x's sizes except K at dim; repeated indices accumulate.
// dtypes as scatter_add (alpha whole for integers). Gradients: dy to x, alpha *
// index_select(dy, dim, index) to source.
//   Tensor totals = index_add(zeros({V, D}), 0, ids, rows);  // rows (K, D) summed per id
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0);

// How often each value occurs in x, as torch.bincount: x is 1-D and holds
// non-negative integers (int64, int32 or uint8; a negative one is a
// ValueError), out[v] counts the elements equal to v, and out has
// max(max(x) + 1, minlength) elements (minlength for an empty x). Without
// weights the counts are int64; with weights (1-D, x's length) out[v] sums the
// weights of those elements, in float32 for float32 weights and float64 for
// any others, as PyTorch (whose empty x gives int64 zeros even with weights:
// here the weights' rule holds for every x). No gradient, as PyTorch's. The
// size needs max(x): on the GPU it is read back, and inside a CUDA-graph
// capture bincount is refused (ValueError). Weighted GPU sums add with atomics.
//   Tensor per_class = bincount(labels, {}, num_classes);          // histogram of labels
//   Tensor confusion = bincount(y * C + pred, {}, C * C).reshape({C, C});
Tensor bincount(const Tensor& x, const Tensor& weights = Tensor(), int64_t minlength = 0);

// The elements of x where mask (Bool) is true, x and mask broadcast together,
// as a 1-D tensor in row-major order, as torch.masked_select. Any dtype; the
// gradient scatters dy back to those places (summed over x's broadcast dims).
//   Tensor kept = masked_select(losses, valid);  // (N, T), (N, T) -> (K)
Tensor masked_select(const Tensor& x, const Tensor& mask);

// The coordinates of x's nonzero elements (NaN counts as nonzero), as
// torch.nonzero (as_tuple=false): int64 (K, x.dim()), one row per element in
// row-major order ((K, 0) for a 0-d x). argwhere is the same, as torch.argwhere.
// No gradient.
//   Tensor hits = nonzero(pred == y);  // (K, 1) positions of the correct predictions
Tensor nonzero(const Tensor& x);
Tensor argwhere(const Tensor& x);

// masked_select, nonzero and argwhere have a size that depends on the values:
// on the GPU they read the count back (one sync), and inside a CUDA-graph
// capture they are refused (ValueError). They run on existing kernels (a
// cumsum numbers the true elements, a scatter places their positions).

}  // namespace loom
