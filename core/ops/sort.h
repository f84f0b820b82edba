// File: core/ops/sort.h
// Ordering along a dim: sort, argsort and topk, as PyTorch's.
//   auto [values, indices] = sort(scores, 1, /*descending=*/true);
//   Tensor top5 = topk(logits, 5).indices;                 // (N, 5) classes
//   Tensor hits = (top5 == labels.unsqueeze(1)).sum();      // top-5 accuracy
#pragma once

#include <cstdint>

#include "core/ops/reduction.h"
#include "core/tensor.h"

namespace loom {

// x's elements put in order along `dim` (ascending, or descending), with the
// int64 positions they came from: values[..., i, ...] = x[..., indices[..., i,
// ...], ...]. The sort is always stable (equal elements keep their order, in
// descending order too), so it gives what torch.sort gives with stable=true.
// NaN sorts as greater than every number (last ascending, first descending)
// and -0 as equal to +0. Any dtype, on the CPU and the GPU; values carry x's
// gradient, to the positions the indices name. A 0-d x is its own sort.
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false);

// sort(x, dim, descending).indices, without a gradient.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);

// The k largest elements along `dim` (the k smallest when !largest) and their
// positions, in sorted order (largest first, or smallest first), as torch.topk
// with sorted=true; equal elements keep their order. k lies in [0, x.size(dim)].
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

}  // namespace loom
