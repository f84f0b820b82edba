// File: core/ops/adaptive_pool.cc
// Adaptive max pooling over PyTorch's cells: output row i of P covers input
// rows floor(i H / P) to ceil((i + 1) H / P) (exclusive), likewise columns, so
// neighbouring cells overlap where P does not divide H.
// N batch, C channels, H, W input plane, P, Q output plane.
#include <vector>

#include "core/error.h"
#include "core/ops/pooling.h"
#include "core/ops/reduction.h"
#include "core/ops/shape_ops.h"

namespace loom {

namespace {

// [begin, end) of output cell `i` of `out` along an input extent of `in`.
struct Bin {
  int64_t begin, end;
};
Bin bin(int64_t i, int64_t in, int64_t out) {
  return {i * in / out, ((i + 1) * in + out - 1) / out};
}

// The maximum of `x` over `b` along `dim`, kept as a size-1 dim.
Tensor max_over(const Tensor& x, int64_t dim, Bin b) {
  return max(x.slice(dim, b.begin, b.end), dim, /*keepdim=*/true).values;
}

}  // namespace

Tensor adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  const auto [p, q] = output_size;
  LOOM_CHECK(x.dim() == 4, ShapeError,
             "[adaptive_max_pool2d] expects input (N, C, H, W), got shape {}",
             shape_str(x.sizes()));
  LOOM_CHECK(p > 0 && q > 0, ValueError,
             "[adaptive_max_pool2d] output_size must be positive, got ({}, {})", p, q);
  const int64_t h = x.size(2), w = x.size(3);
  LOOM_CHECK(h > 0 && w > 0, ShapeError,
             "[adaptive_max_pool2d] input (N, C, H, W) = {} has an empty plane; each output "
             "cell needs at least one element",
             shape_str(x.sizes()));
  if (h % p == 0 && w % q == 0) {  // equal, disjoint cells: one window (cuDNN on the GPU)
    const std::array<int64_t, 2> cell = {h / p, w / q};
    return max_pool2d(x, {.kernel_size = cell, .stride = cell});
  }
  // A max over a rectangle is a max over its rows' maxima: reduce each band of
  // rows once, then its cells along the width.
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < p; ++i) {
    const Tensor band = max_over(x, 2, bin(i, h, p));  // (N, C, 1, W)
    std::vector<Tensor> cells;
    for (int64_t j = 0; j < q; ++j) cells.push_back(max_over(band, 3, bin(j, w, q)));
    rows.push_back(cat(cells, 3));
  }
  return cat(rows, 2);
}

}  // namespace loom
