// File: core/ops/indexing.cc
// gather and index_select with their scatter-add backward. index_select is a
// gather with the index broadcast over the other dims (stride 0), so one pair
// of kernels serves both (and embedding, core/ops/embedding.cc). one_hot is a
// comparison with every class index.
#include "core/ops/indexing.h"

#include <string_view>
#include <vector>

#include "core/autograd.h"
#include "core/cpu/indexing.h"
#include "core/cuda/capture.h"
#include "core/cuda/indexing.h"
#include "core/error.h"
#include "core/ops/compare.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing_internal.h"
#include "core/ops/reduction.h"
#include "core/trace.h"

namespace loom {

namespace {

// `t`'s memory seen over `sizes` with dim's stride 0: the base view of
// core/cpu/indexing.h, where element i lies at base(i) + index[i] * t.stride(dim).
Strided base_view(const Tensor& t, int64_t dim, const Shape& sizes) {
  Strided base = t.strided();
  base.sizes = sizes;
  base.strides[dim] = 0;
  return base;
}

bool checks_on_host(const Tensor& index) {
  DeviceGuard guard(index.device());
  return !(index.device().is_cuda() && cuda::is_capturing());
}

// int64 on x's device, every value in [0, limit).
Tensor checked_index(const Tensor& index, const Tensor& x, int64_t limit, std::string_view op) {
  LOOM_CHECK(index.defined(), ValueError, "[{}] index is an undefined tensor", op);
  LOOM_CHECK(!is_floating(index.dtype()), TypeError,
             "[{}] index has dtype {}; indices are integers (int64), convert with "
             ".to(DType::Int64)",
             op, dtype_name(index.dtype()));
  LOOM_CHECK(index.device() == x.device(), DeviceError,
             "[{}] index is on {} but the tensor on {}; move the index with .to(device)", op,
             index.device().str(), x.device().str());
  Tensor out = index.detach().to(DType::Int64);
  if (!checks_on_host(out)) return out;
  const std::vector<int64_t> values = out.to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) {
    LOOM_CHECK(values[i] >= 0 && values[i] < limit, IndexError,
               "[{}] index {} (element {} of the index, shape {}) is out of range for a dim of "
               "size {}; indices lie in [0, {})",
               op, values[i], i, shape_str(out.sizes()), limit, limit);
  }
  return out;
}

void check_gather_shapes(const Tensor& x, int64_t dim, const Tensor& index) {
  bool fits = index.dim() == x.dim();
  for (int64_t d = 0; fits && d < x.dim(); ++d) {
    fits = d == dim || index.size(d) <= x.size(d);
  }
  LOOM_CHECK(fits, ShapeError,
             "[gather] index of shape {} does not fit x of shape {} along dim {}: it needs x's "
             "number of dims and at most x's size in every other dim",
             shape_str(index.sizes()), shape_str(x.sizes()), dim);
}

// dx (x_sizes, zeros) with dy scatter-added at index along dim.
Tensor gather_backward(const Tensor& dy, int64_t dim, const Tensor& index, const Shape& x_sizes) {
  Tensor dx = zeros(x_sizes, dy.options());
  LOOM_KERNEL(dx, scatter_add, base_view(dx, dim, index.sizes()), dx.stride(dim),
                       index.strided(), dy.strided());
  return dx;
}

}  // namespace

namespace indexing_detail {

// gather after validation; index is int64, in range, of the output's sizes.
Tensor gather_in_range(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = empty(index.sizes(), x.options());
  if (x.dim() == 0) {
    out.copy_(x.detach());
  } else {
    LOOM_KERNEL(out, gather, out.strided(), base_view(x, dim, index.sizes()),
                         x.stride(dim), index.strided());
  }
  if (needs_grad({x})) {
    check_float_tensor(x, "gather backward", "x");
    const Shape x_sizes = x.sizes();
    record("gather", {x}, out, [dim, index, x_sizes](const Tensor& dy) {
      return std::vector<Tensor>{gather_backward(dy, dim, index, x_sizes)};
    });
  }
  return out;
}

}  // namespace indexing_detail

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  trace::OpScope trace("gather");
  LOOM_CHECK(x.defined(), ValueError, "[gather] x is an undefined tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "gather");
  const Tensor idx = checked_index(index, x, x.dim() == 0 ? 1 : x.size(d), "gather");
  check_gather_shapes(x, d, idx);
  Tensor y = indexing_detail::gather_in_range(x, d, idx);
  if (trace.recording()) trace.record({x, index}, y, {{"dim", d}});
  return y;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  trace::OpScope trace("index_select");
  LOOM_CHECK(x.defined(), ValueError, "[index_select] x is an undefined tensor");
  LOOM_CHECK(x.dim() >= 1, ShapeError, "[index_select] x is 0-d; it needs a dim to select along");
  const int64_t d = normalize_dim(dim, x.dim(), "index_select");
  LOOM_CHECK(index.defined() && index.dim() == 1, ShapeError,
             "[index_select] index must be 1-D, got shape {}; flatten it first",
             index.defined() ? shape_str(index.sizes()) : std::string("(undefined)"));
  const Tensor idx = checked_index(index, x, x.size(d), "index_select");
  Shape out_sizes = x.sizes();
  out_sizes[d] = idx.size(0);
  Shape along(x.dim(), 1);
  along[d] = idx.size(0);
  Tensor y = indexing_detail::gather_in_range(x, d, idx.view(along).expand(out_sizes));
  if (trace.recording()) trace.record({x, index}, y, {{"dim", d}});
  return y;
}

Tensor one_hot(const Tensor& indices, std::optional<int64_t> num_classes) {
  LOOM_CHECK(indices.defined(), ValueError, "[one_hot] indices is an undefined tensor");
  LOOM_CHECK(indices.dtype() == DType::Int64, TypeError,
             "[one_hot] indices must be int64 class indices, got {}; convert with .to(DType::Int64)",
             dtype_name(indices.dtype()));
  LOOM_CHECK(!num_classes || *num_classes >= 0, ValueError, "[one_hot] num_classes must be >= 0, got {}",
             num_classes.value_or(0));
  const bool on_host = checks_on_host(indices);
  LOOM_CHECK(on_host || num_classes, ValueError,
             "[one_hot] inside a CUDA-graph capture the indices cannot be read back; pass num_classes");
  const bool empty = indices.numel() == 0;
  LOOM_CHECK(!empty || num_classes, ValueError,
             "[one_hot] cannot infer num_classes from empty indices (shape {}); pass num_classes",
             shape_str(indices.sizes()));
  int64_t classes = num_classes.value_or(0);
  if (on_host && !empty) {
    const Tensor wide = indices.detach().to(DType::Float64);  // min and max compute in floating dtypes
    const auto lowest = static_cast<int64_t>(min(wide).item()), highest = static_cast<int64_t>(max(wide).item());
    classes = num_classes.value_or(highest + 1);
    LOOM_CHECK(lowest >= 0 && highest < classes, IndexError,
               "[one_hot] indices must lie in [0, {}), got values from {} to {}", classes, lowest, highest);
  }
  const Tensor all_classes = arange(classes, {.dtype = DType::Int64, .device = indices.device()});
  return eq(indices.unsqueeze(-1), all_classes).to(DType::Int64);
}

}  // namespace loom
