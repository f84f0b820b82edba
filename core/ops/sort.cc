// File: core/ops/sort.cc
// sort, argsort and topk: the kernels order rows of a contiguous copy with the
// dim moved last and return positions only; the values are a gather of x at
// them, whose backward scatters the gradient back (so these need none of
// their own). kthvalue and median pick one position of that order per line.
#include "core/ops/sort.h"

#include <limits>

#include "core/autograd.h"
#include "core/cpu/sort.h"
#include "core/cuda/sort.h"
#include "core/error.h"
#include "core/ops/compare.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing_internal.h"
#include "core/trace.h"

namespace loom {

namespace {

// The positions that order x along d (normalized), shaped as x.
Tensor order_along(const Tensor& x, int64_t d, bool descending) {
  if (x.dim() == 0) return zeros({}, {.dtype = DType::Int64, .device = x.device()});
  const int64_t last = x.dim() - 1;
  const Tensor keys = x.detach().transpose(d, last).contiguous();
  Tensor order = empty(keys.sizes(), {.dtype = DType::Int64, .device = x.device()});
  LOOM_KERNEL(keys, sort_rows, order.strided(), keys.strided(), descending);
  return order.transpose(d, last);
}

ValuesIndices sorted(const Tensor& x, int64_t d, bool descending) {
  Tensor indices = order_along(x, d, descending);
  return {indexing_detail::gather_in_range(x, d, indices), indices};
}

int64_t checked_sort_dim(const Tensor& x, int64_t dim, std::string_view op) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] x is an undefined tensor", op);
  return normalize_dim(dim, x.dim(), op);
}

}  // namespace

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending) {
  trace::OpScope trace("sort");
  const int64_t d = checked_sort_dim(x, dim, "sort");
  ValuesIndices result = sorted(x, d, descending);
  if (trace.recording()) {
    trace.record({x}, {result.values, result.indices}, {{"dim", d}, {"descending", int64_t{descending}}});
  }
  return result;
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  NoGradGuard no_grad;
  return sort(x, dim, descending).indices;
}

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  trace::OpScope trace("topk");
  const int64_t d = checked_sort_dim(x, dim, "topk");
  if (x.dim() == 0) {  // as its one-element vector; k = 1 gives a 0-d result, as torch.topk
    ValuesIndices vector = topk(x.reshape({1}), k, 0, largest);
    return k == 1 ? ValuesIndices{vector.values.reshape({}), vector.indices.reshape({})} : vector;
  }
  const int64_t extent = x.size(d);
  LOOM_CHECK(k >= 0 && k <= extent, ValueError,
             "[topk] k = {} is out of range for dim {} of size {} (shape {}); k lies in [0, {}]", k, d, extent,
             shape_str(x.sizes()), extent);
  const Tensor order = order_along(x, d, largest);
  const Tensor indices = order.narrow(d, 0, k).contiguous();
  ValuesIndices result{indexing_detail::gather_in_range(x, d, indices), indices};
  if (trace.recording()) {
    trace.record({x}, {result.values, result.indices}, {{"k", k}, {"dim", d}, {"largest", int64_t{largest}}});
  }
  return result;
}

namespace {

// The element at rank[...] (int64, x's shape with size 1 along d) of each line
// of x ordered ascending along d, and its position in x; keepdim as torch's.
ValuesIndices pick_ranked(const Tensor& x, int64_t d, const Tensor& rank, bool keepdim) {
  const Tensor position = indexing_detail::gather_in_range(order_along(x, d, false), d, rank);
  ValuesIndices result{indexing_detail::gather_in_range(x, d, position), position};
  if (!keepdim) result = {result.values.squeeze(d), result.indices.squeeze(d)};
  return result;
}

// The line along d (normalized) must hold an element.
void check_line_not_empty(const Tensor& x, int64_t d, std::string_view op) {
  LOOM_CHECK(x.size(d) > 0, ValueError, "[{}] dim {} of shape {} is empty; there is no {} to take", op, d,
             shape_str(x.sizes()), op);
}

// The rank of the median in each line along d: (n - 1) / 2 (the lower one, as
// PyTorch's). With NaN in a line, median gives its first NaN (rank n - NaNs,
// NaN sorting last); nanmedian the median of the other elements (a line of
// NaN only gives NaN, at rank 0).
Tensor median_rank(const Tensor& x, int64_t d, bool skip_nan) {
  Shape line = x.sizes();
  line[d] = 1;
  const int64_t n = x.size(d);
  const TensorOptions index_options{.dtype = DType::Int64, .device = x.device()};
  if (!is_floating(x.dtype())) return full(line, static_cast<double>((n - 1) / 2), index_options);
  const Tensor nans = sum(ne(x, x), {d}, true);
  if (!skip_nan) {
    return where(gt(nans, 0.0), rsub(nans, static_cast<double>(n)), full({}, static_cast<double>((n - 1) / 2),
                                                                         index_options));
  }
  return floor_divide(maximum(rsub(nans, static_cast<double>(n - 1)), zeros({}, index_options)), 2.0);
}

ValuesIndices median_along(const Tensor& x, int64_t dim, bool keepdim, bool skip_nan, const char* op) {
  trace::OpScope trace(op);
  const int64_t d = checked_sort_dim(x, dim, op);
  if (x.dim() == 0) {  // as its one-element vector
    ValuesIndices vector = median_along(x.reshape({1}), 0, keepdim, skip_nan, op);
    return {vector.values.reshape({}), vector.indices.reshape({})};
  }
  check_line_not_empty(x, d, op);
  ValuesIndices result = pick_ranked(x, d, median_rank(x.detach(), d, skip_nan), keepdim);
  if (trace.recording()) {
    trace.record({x}, {result.values, result.indices}, {{"dim", d}, {"keepdim", int64_t{keepdim}}});
  }
  return result;
}

Tensor median_all(const Tensor& x, bool skip_nan, const char* op) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] x is an undefined tensor", op);
  if (x.numel() == 0) {
    LOOM_CHECK(is_floating(x.dtype()), ValueError,
               "[{}] of an empty {} tensor (shape {}) has no value; pass a non-empty tensor", op,
               dtype_name(x.dtype()), shape_str(x.sizes()));
    return full({}, std::numeric_limits<double>::quiet_NaN(), x.options());
  }
  return median_along(x.reshape({x.numel()}), 0, false, skip_nan, op).values;
}

}  // namespace

ValuesIndices kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  trace::OpScope trace("kthvalue");
  const int64_t d = checked_sort_dim(x, dim, "kthvalue");
  if (x.dim() == 0) {  // as its one-element vector
    ValuesIndices vector = kthvalue(x.reshape({1}), k, 0, keepdim);
    return {vector.values.reshape({}), vector.indices.reshape({})};
  }
  const int64_t n = x.size(d);
  LOOM_CHECK(k >= 1 && k <= n, ValueError,
             "[kthvalue] k = {} is out of range for dim {} of size {} (shape {}); k counts from 1 to {}", k, d, n,
             shape_str(x.sizes()), n);
  Shape line = x.sizes();
  line[d] = 1;
  const Tensor rank = full(line, static_cast<double>(k - 1), {.dtype = DType::Int64, .device = x.device()});
  ValuesIndices result = pick_ranked(x, d, rank, keepdim);
  if (trace.recording()) {
    trace.record({x}, {result.values, result.indices}, {{"k", k}, {"dim", d}, {"keepdim", int64_t{keepdim}}});
  }
  return result;
}

ValuesIndices median(const Tensor& x, int64_t dim, bool keepdim) {
  return median_along(x, dim, keepdim, false, "median");
}

ValuesIndices nanmedian(const Tensor& x, int64_t dim, bool keepdim) {
  return median_along(x, dim, keepdim, true, "nanmedian");
}

Tensor median(const Tensor& x) { return median_all(x, false, "median"); }

Tensor nanmedian(const Tensor& x) { return median_all(x, true, "nanmedian"); }

}  // namespace loom
