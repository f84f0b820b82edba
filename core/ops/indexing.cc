// File: core/ops/indexing.cc
// gather and index_select with their scatter-add backward. index_select is a
// gather with the index broadcast over the other dims (stride 0), so one pair
// of kernels serves both (and embedding, core/ops/embedding.cc). one_hot is a
// comparison with every class index.
//
// scatter and scatter_add are the same base-view kernels writing instead of
// reading; index_add is a scatter_add with the index broadcast as
// index_select's, and bincount one into zeros. masked_select, nonzero and
// argwhere are composites: a cumsum over the mask numbers the true elements,
// a scatter puts each one's position at its number, and gather / floor_divide
// turn positions into values or coordinates, so the GPU runs them on existing
// kernels (reading back only the count).
#include "core/ops/indexing.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/autograd.h"
#include "core/cpu/indexing.h"
#include "core/cuda/capture.h"
#include "core/cuda/indexing.h"
#include "core/error.h"
#include "core/numerics.h"
#include "core/ops/compare.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing_internal.h"
#include "core/ops/reduction.h"
#include "core/ops/shape_ops.h"
#include "core/ops/sort.h"
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

// scatter's shape rule (PyTorch's): index, src (when a tensor) and x have one
// number of dims, index.size(d) <= src.size(d) for every d and index.size(d) <=
// x.size(d) for d != dim.
void check_scatter_shapes(const Tensor& x, int64_t dim, const Tensor& index, const Tensor* src,
                          std::string_view op) {
  bool fits = index.dim() == x.dim() && (!src || src->dim() == x.dim());
  for (int64_t d = 0; fits && d < x.dim(); ++d) {
    fits = (d == dim || index.size(d) <= x.size(d)) && (!src || index.size(d) <= src->size(d));
  }
  LOOM_CHECK(fits, ShapeError,
             "[{}] index of shape {} does not fit x of shape {}{} along dim {}: index, x and src need one "
             "number of dims, index at most src's size in every dim and x's in every other dim",
             op, shape_str(index.sizes()), shape_str(x.sizes()),
             src ? " and src of shape " + shape_str(src->sizes()) : std::string(), dim);
}

// The dtypes scatter-add accumulates in on x's device.
void check_accumulable(const Tensor& x, std::string_view op) {
  const DType t = x.dtype();
  const bool ok = t == DType::Float32 || t == DType::Float64 || t == DType::Int32 || t == DType::Int64 ||
                  (x.device().is_cuda() && is_half_precision(t));
  LOOM_CHECK(ok, TypeError,
             "[{}] cannot add up {} on the {}: it adds float32, float64, int32 and int64 (and bfloat16 and "
             "float16 on the GPU); convert with .to(DType::Int32) or .to(DType::Float32)",
             op, dtype_name(t), x.device().is_cuda() ? "GPU" : "CPU");
}

void check_same_dtype_and_device(const Tensor& x, const Tensor& other, std::string_view name, std::string_view op) {
  LOOM_CHECK(other.defined(), ValueError, "[{}] {} is an undefined tensor", op, name);
  LOOM_CHECK(other.dtype() == x.dtype(), TypeError,
             "[{}] {} has dtype {} but x has {}; they must match (convert with .to(DType::...))", op, name,
             dtype_name(other.dtype()), dtype_name(x.dtype()));
  LOOM_CHECK(other.device() == x.device(), DeviceError, "[{}] {} is on {} but x on {}; move it with .to(device)",
             op, name, other.device().str(), x.device().str());
}

// src's first index.sizes() elements: the part scatter reads (a view, so its
// gradient lands there and the rest of src gets zeros).
Tensor narrow_to(const Tensor& src, const Shape& sizes) {
  Tensor out = src;
  for (int64_t d = 0; d < src.dim(); ++d) {
    if (out.size(d) != sizes[d]) out = out.narrow(d, 0, sizes[d]);
  }
  return out;
}

// The stable order of each of index's lines along dim. index_select's and embedding's index is one
// line broadcast over the other dims (stride 0 there), so every line has the same order: it is sorted
// once and broadcast, instead of once per column.
Tensor line_order(const Tensor& index, int64_t dim) {
  Tensor line = index;
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d == dim || index.size(d) <= 1) continue;
    if (index.stride(d) != 0) return argsort(index, dim);
    line = line.narrow(d, 0, 1);
  }
  return argsort(line, dim).expand(index.sizes());
}

// out's base view (base_view(out, dim, index.sizes())) += src at index along dim. The GPU adds
// repeated indices' floating values by atomics, in whatever order they land; under a
// deterministic policy each line along dim is first sorted stably by target, and each run of
// one target is added by one thread in the line's order: the CPU's order, so the CPU's bits.
void scatter_add_into(const Tensor& out, int64_t dim, const Strided& base, const Tensor& index, const Tensor& src) {
  if (out.device().is_cuda() && numerics_policy().deterministic && is_floating(src.dtype()) && index.dim() > 0) {
    NoGradGuard no_grad;
    const Tensor order = line_order(index, dim);
    const Tensor sorted_index = indexing_detail::gather_in_range(index, dim, order).contiguous();
    const Tensor sorted_src = indexing_detail::gather_in_range(src.detach(), dim, order).contiguous();
    on_device(out.device(), [&] {
      cuda::scatter_add_sorted(base, out.stride(dim), dim, sorted_index.strided(), sorted_src.strided());
    });
    return;
  }
  LOOM_KERNEL(out, scatter_add, base, out.stride(dim), index.strided(), src.strided());
}

enum class ScatterMode { Write, Add };

// A copy of x with src written (added) at index along dim: index int64, in
// range, of src's sizes; src of x's dtype and device. No autograd.
Tensor scatter_values(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, ScatterMode mode) {
  Tensor out = x.detach().clone();
  if (index.numel() == 0) return out;
  const Strided base = base_view(out, dim, index.sizes());
  if (mode == ScatterMode::Add) {
    scatter_add_into(out, dim, base, index, src);
  } else {
    LOOM_KERNEL(out, scatter, base, out.stride(dim), index.strided(), src.strided());
  }
  return out;
}

// scatter_add after validation, recording the gradients dy (to x) and dy
// gathered at index (to src, index's sizes).
Tensor scatter_add_in_range(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = scatter_values(x, dim, index, src, ScatterMode::Add);
  if (needs_grad({x, src})) {
    check_float_tensor(x, "scatter_add backward", "x");
    record("scatter_add", {x, src}, out, [dim, index](const Tensor& dy) {
      return std::vector<Tensor>{dy, indexing_detail::gather_in_range(dy, dim, index)};
    });
  }
  return out;
}

// The operands of scatter and scatter_add, checked: a 0-d x (with a 0-d index
// and src) seen as 1-D, dim normalized, the index int64 and in range.
struct ScatterOperands {
  Tensor x, index, src;  // src: undefined for a value
  int64_t dim = 0;
  bool zero_d = false;
  bool empty_index = false;  // then nothing else is checked and the result is x's copy, as in PyTorch
};

ScatterOperands scatter_operands(const Tensor& x, int64_t dim, const Tensor& index, const Tensor* src,
                                 std::string_view op) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] x is an undefined tensor", op);
  if (src) check_same_dtype_and_device(x, *src, "src", op);
  LOOM_CHECK(index.defined(), ValueError, "[{}] index is an undefined tensor", op);
  ScatterOperands o{x, index, src ? *src : Tensor()};
  o.dim = normalize_dim(dim, x.dim(), op);
  o.empty_index = index.numel() == 0;
  if (o.empty_index) return o;
  o.zero_d = x.dim() == 0 && index.dim() == 0 && (!src || src->dim() == 0);
  if (o.zero_d) {
    o.x = x.unsqueeze(0);
    o.index = index.unsqueeze(0);
    if (src) o.src = src->unsqueeze(0);
  }
  check_scatter_shapes(o.x, o.dim, o.index, src ? &o.src : nullptr, op);
  o.index = checked_index(o.index, o.x, o.x.size(o.dim), op);
  if (src) o.src = narrow_to(o.src, o.index.sizes());
  return o;
}

// For the ops whose result's size depends on t's values: they read it back,
// which a CUDA-graph capture cannot.
void refuse_in_capture(const Tensor& t, std::string_view op) {
  LOOM_CHECK(checks_on_host(t), ValueError,
             "[{}] the result's size depends on the values, which cannot be read back inside a CUDA-graph "
             "capture; run it before or after the capture",
             op);
}

// The row-major positions (int64, (K,)) of a Bool mask's true elements; K is
// read back from the device (refuse_in_capture first).
Tensor true_positions(const Tensor& mask) {
  const Tensor flat = mask.detach().reshape({-1});
  const int64_t n = flat.numel();
  const TensorOptions i64 = {.dtype = DType::Int64, .device = mask.device()};
  if (n == 0) return zeros({0}, i64);
  const Tensor counts = cumsum(flat, 0);  // int64: element j is the (counts[j])-th true one
  const auto k = static_cast<int64_t>(counts.select(0, n - 1).item());
  // True elements go to counts - 1, all false ones to a spare slot k, dropped after.
  const Tensor target = where(flat, counts - 1.0, full({}, static_cast<double>(k), i64));
  Tensor out = zeros({k + 1}, i64);
  LOOM_KERNEL(out, scatter, base_view(out, 0, {n}), out.stride(0), target.strided(), arange(n, i64).strided());
  return out.narrow(0, 0, k);
}

// dx (x_sizes, zeros) with dy scatter-added at index along dim.
Tensor gather_backward(const Tensor& dy, int64_t dim, const Tensor& index, const Shape& x_sizes) {
  Tensor dx = zeros(x_sizes, dy.options());
  scatter_add_into(dx, dim, base_view(dx, dim, index.sizes()), index, dy);
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

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  trace::OpScope trace("scatter_add");
  const ScatterOperands o = scatter_operands(x, dim, index, &src, "scatter_add");
  if (o.empty_index) return x.clone();
  check_accumulable(o.x, "scatter_add");
  Tensor y = scatter_add_in_range(o.x, o.dim, o.index, o.src);
  if (o.zero_d) y = y.squeeze(0);
  if (trace.recording()) trace.record({x, index, src}, y, {{"dim", o.dim}});
  return y;
}

namespace {

// scatter of src (a tensor of index's sizes, or a value broadcast there):
// gradients dy with the written places zeroed (to x) and dy gathered at index
// (to src, when a tensor).
Tensor scatter_in_range(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, bool src_is_value) {
  Tensor out = scatter_values(x, dim, index, src, ScatterMode::Write);
  if (needs_grad({x, src})) {
    check_float_tensor(x, "scatter backward", "x");
    record("scatter", {x, src_is_value ? Tensor() : src}, out, [dim, index, src_is_value](const Tensor& dy) {
      const Tensor zero = zeros({}, dy.options()).expand(index.sizes());
      const Tensor dx = scatter_values(dy, dim, index, zero, ScatterMode::Write);
      return std::vector<Tensor>{dx, src_is_value ? Tensor() : indexing_detail::gather_in_range(dy, dim, index)};
    });
  }
  return out;
}

}  // namespace

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  trace::OpScope trace("scatter");
  const ScatterOperands o = scatter_operands(x, dim, index, &src, "scatter");
  if (o.empty_index) return x.clone();
  Tensor y = scatter_in_range(o.x, o.dim, o.index, o.src, false);
  if (o.zero_d) y = y.squeeze(0);
  if (trace.recording()) trace.record({x, index, src}, y, {{"dim", o.dim}});
  return y;
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  trace::OpScope trace("scatter");
  const ScatterOperands o = scatter_operands(x, dim, index, nullptr, "scatter");
  if (o.empty_index) return x.clone();
  const Tensor src = full({}, value, x.options()).expand(o.index.sizes());
  Tensor y = scatter_in_range(o.x, o.dim, o.index, src, true);
  if (o.zero_d) y = y.squeeze(0);
  if (trace.recording()) trace.record({x, index}, y, {{"dim", o.dim}, {"value", value}});
  return y;
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, double alpha) {
  trace::OpScope trace("index_add");
  LOOM_CHECK(x.defined(), ValueError, "[index_add] x is an undefined tensor");
  check_same_dtype_and_device(x, source, "source", "index_add");
  check_accumulable(x, "index_add");
  const int64_t d = normalize_dim(dim, x.dim(), "index_add");
  LOOM_CHECK(index.defined() && index.dim() <= 1, ShapeError,
             "[index_add] index must be 1-D, got shape {}; flatten it first",
             index.defined() ? shape_str(index.sizes()) : std::string("(undefined)"));
  LOOM_CHECK(is_floating(x.dtype()) || alpha == static_cast<double>(static_cast<int64_t>(alpha)), TypeError,
             "[index_add] alpha {} is not a whole number, which an {} x cannot take", alpha, dtype_name(x.dtype()));
  const bool zero_d = x.dim() == 0;
  const Tensor x1 = zero_d ? x.unsqueeze(0) : x, source1 = source.dim() == 0 ? source.unsqueeze(0) : source;
  const Tensor index1 = index.reshape({-1});
  bool fits = source1.dim() == x1.dim() && source1.size(d) == index1.size(0);
  for (int64_t k = 0; fits && k < x1.dim(); ++k) fits = k == d || source1.size(k) == x1.size(k);
  LOOM_CHECK(fits, ShapeError,
             "[index_add] source of shape {} does not fit x of shape {} and an index of {} elements along dim {}: "
             "source needs x's sizes except at dim, where it has one slice per index",
             shape_str(source.sizes()), shape_str(x.sizes()), index1.size(0), d);
  const Tensor idx = checked_index(index1, x1, x1.size(d), "index_add");
  Shape along(x1.dim(), 1);
  along[d] = idx.size(0);
  const Tensor src = alpha == 1.0 ? source1 : source1 * alpha;
  Tensor y = scatter_add_in_range(x1, d, idx.view(along).expand(source1.sizes()), src);
  if (zero_d) y = y.squeeze(0);
  if (trace.recording()) trace.record({x, index, source}, y, {{"dim", d}, {"alpha", alpha}});
  return y;
}

Tensor bincount(const Tensor& x, const Tensor& weights, int64_t minlength) {
  trace::OpScope trace("bincount");
  LOOM_CHECK(x.defined(), ValueError, "[bincount] x is an undefined tensor");
  const DType t = x.dtype();
  LOOM_CHECK(t == DType::Int64 || t == DType::Int32 || t == DType::UInt8, TypeError,
             "[bincount] x must hold integers (int64, int32 or uint8), got {}; convert with .to(DType::Int64)",
             dtype_name(t));
  LOOM_CHECK(x.dim() == 1, ShapeError, "[bincount] x must be 1-D, got shape {}; flatten it first",
             shape_str(x.sizes()));
  LOOM_CHECK(minlength >= 0, ValueError, "[bincount] minlength must be >= 0, got {}", minlength);
  if (weights.defined()) {
    LOOM_CHECK(weights.dim() == 1 && weights.size(0) == x.size(0), ShapeError,
               "[bincount] weights must be 1-D with x's {} elements, got shape {}", x.size(0),
               shape_str(weights.sizes()));
    LOOM_CHECK(weights.device() == x.device(), DeviceError,
               "[bincount] weights are on {} but x on {}; move them with .to(device)", weights.device().str(),
               x.device().str());
  }
  refuse_in_capture(x, "bincount");
  int64_t bins = minlength;
  if (x.numel() > 0) {
    const Tensor wide = x.detach().to(DType::Float64);  // min and max compute in floating dtypes
    const auto lowest = static_cast<int64_t>(min(wide).item()), highest = static_cast<int64_t>(max(wide).item());
    LOOM_CHECK(lowest >= 0, ValueError, "[bincount] x must hold non-negative integers, got a smallest value of {}",
               lowest);
    bins = std::max(bins, highest + 1);
  }
  // PyTorch's rule: counts are int64, float32 weights sum in float32 and any others in float64.
  const DType out_dtype =
      !weights.defined() ? DType::Int64 : weights.dtype() == DType::Float32 ? DType::Float32 : DType::Float64;
  const TensorOptions options = {.dtype = out_dtype, .device = x.device()};
  const Tensor src = weights.defined() ? weights.detach().to(out_dtype) : ones({1}, options).expand({x.size(0)});
  Tensor y = scatter_values(zeros({bins}, options), 0, x.detach().to(DType::Int64), src, ScatterMode::Add);
  if (trace.recording()) trace.record({x, weights}, y, {{"minlength", minlength}});
  return y;
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  trace::OpScope trace("masked_select");
  LOOM_CHECK(x.defined(), ValueError, "[masked_select] x is an undefined tensor");
  LOOM_CHECK(mask.defined(), ValueError, "[masked_select] mask is an undefined tensor");
  LOOM_CHECK(mask.dtype() == DType::Bool, TypeError,
             "[masked_select] mask must be Bool, got {}; make one with a comparison (x > 0) or .to(DType::Bool)",
             dtype_name(mask.dtype()));
  LOOM_CHECK(mask.device() == x.device(), DeviceError,
             "[masked_select] mask is on {} but x on {}; move it with .to(device)", mask.device().str(),
             x.device().str());
  const Shape sizes = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  refuse_in_capture(x, "masked_select");
  const Tensor positions = true_positions(mask.expand(sizes));
  const Tensor flat = (x.sizes() == sizes ? x : x.expand(sizes)).reshape({-1});
  Tensor y = indexing_detail::gather_in_range(flat, 0, positions);
  if (trace.recording()) trace.record({x, mask}, y);
  return y;
}

Tensor nonzero(const Tensor& x) {
  trace::OpScope trace("nonzero");
  LOOM_CHECK(x.defined(), ValueError, "[nonzero] x is an undefined tensor");
  refuse_in_capture(x, "nonzero");
  const Tensor positions = true_positions(x.detach() != 0.0);
  const int64_t k = positions.size(0);
  Tensor y;
  if (x.dim() == 0) {
    y = zeros({k, 0}, positions.options());
  } else if (x.dim() == 1) {
    y = positions.unsqueeze(1);
  } else {
    // A row-major position's coordinates: (position // stride) % size per dim.
    std::vector<Tensor> coordinates;
    int64_t stride = numel_of(x.sizes());
    for (int64_t d = 0; d < x.dim(); ++d) {
      stride = x.size(d) == 0 ? 0 : stride / x.size(d);
      coordinates.push_back(remainder(floor_divide(positions, static_cast<double>(std::max<int64_t>(stride, 1))),
                                      static_cast<double>(std::max<int64_t>(x.size(d), 1))));
    }
    y = stack(coordinates, 1);
  }
  if (trace.recording()) trace.record({x}, y);
  return y;
}

Tensor argwhere(const Tensor& x) { return nonzero(x); }

}  // namespace loom
