// File: core/ops/sort.h
// Ordering along a dim: sort, argsort, topk, kthvalue and median, as PyTorch's.
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

// The k-th smallest element along `dim` (k counts from 1) and its position, as
// torch.kthvalue: NaN counts as greater than every number, equal elements keep
// their order (the position is the one sort would put at k - 1). The value
// carries x's gradient to that position.
ValuesIndices kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false);

// The median along `dim` and its position, as torch.median: the lower of the
// two middle elements when the dim's size is even (no mean of the two), NaN
// (the line's first) when the line holds one. nanmedian skips NaN instead
// (NaN only for a line of NaN), as torch.nanmedian. Any dtype; the value
// carries x's gradient to its position. Without a dim: the median of every
// element (NaN for an empty floating tensor), a 0-D tensor.
//   Tensor typical = median(losses);             // robust to a few outliers
//   auto [med, where] = median(scores, 1);       // (N, C) -> (N), (N)
ValuesIndices median(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices nanmedian(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor median(const Tensor& x);
Tensor nanmedian(const Tensor& x);

}  // namespace loom
