// File: core/ops/sort.cc
// sort, argsort and topk: the kernels order rows of a contiguous copy with the
// dim moved last and return positions only; the values are a gather of x at
// them, whose backward scatters the gradient back (so these need none of
// their own).
#include "core/ops/sort.h"

#include "core/autograd.h"
#include "core/cpu/sort.h"
#include "core/cuda/sort.h"
#include "core/error.h"
#include "core/ops/dispatch.h"
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

}  // namespace loom
