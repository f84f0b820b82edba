// File: core/ops/reduction.cc
// Reductions (sum, mean, max, argmax, prod, sum_to) and the running sum and
// product (cumsum, cumprod): validation, dispatch and backward; min, argmin,
// var, std and logsumexp are composites of them.
#include "core/ops/reduction.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/cpu/elementwise.h"
#include "core/cpu/reduce.h"
#include "core/cpu/sort.h"
#include "core/cuda/sort.h"
#include "core/error.h"
#include "core/ops/compare.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/shape_ops.h"
#include "core/trace.h"

namespace loom {

namespace {

void check_input(const Tensor& x, std::string_view op) { check_float_tensor(x, op); }

// `x`'s sizes with every dim in `dims` set to 1 (the keepdim shape).
Shape kept_sizes(const Tensor& x, const Shape& dims, std::string_view op) {
  Shape keep = x.sizes();
  std::vector<bool> seen(std::max<int64_t>(x.dim(), 1), false);
  for (int64_t dim : dims) {
    int64_t d = normalize_dim(dim, x.dim(), op);
    LOOM_CHECK(!seen[d], ValueError, "[{}] dim {} appears twice in {}", op, d, shape_str(dims));
    seen[d] = true;
    if (x.dim() > 0) keep[d] = 1;
  }
  return keep;
}

// `x`'s sizes without the dims in `dims` (the shape of a reduction without keepdim).
Shape reduced_sizes(const Tensor& x, const Shape& dims, std::string_view op) {
  if (x.dim() == 0) return {};
  std::vector<bool> reduced(x.dim(), false);
  for (int64_t dim : dims) reduced[normalize_dim(dim, x.dim(), op)] = true;
  Shape sizes;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!reduced[d]) sizes.push_back(x.size(d));
  }
  return sizes;
}

Shape all_dims(const Tensor& x) {
  Shape dims(x.dim());
  for (int64_t d = 0; d < x.dim(); ++d) dims[d] = d;
  return dims;
}

Tensor reduce_values(const Tensor& x, const Shape& keep, kernel::ReduceOp op) {
  Tensor out = empty(keep, x.options());
  LOOM_KERNEL(out, reduce, out.strided(), x.strided(), op);
  return out;
}

// Sum or mean over `dims`; backward broadcasts dy back (divided by the count for mean).
Tensor sum_or_mean(const Tensor& x, const Shape& dims, bool keepdim, bool mean, const char* name) {
  const bool counts =
      x.defined() && (x.dtype() == DType::Bool || (!mean && !is_floating(x.dtype())));
  if (counts) {
    // (pred == y).sum() counts, as in PyTorch; a mask's mean is the fraction of
    // true elements (integers have no mean, as in PyTorch). Summed in float64,
    // exact while the total stays below 2^53.
    Tensor wide = sum_or_mean(x.to(DType::Float64), dims, keepdim, mean, name);
    return wide.to(mean ? DType::Float32 : DType::Int64);
  }
  check_input(x, name);
  Shape keep = kept_sizes(x, dims, name);
  Tensor out = reduce_values(x, keep, mean ? kernel::ReduceOp::Mean : kernel::ReduceOp::Sum);
  Tensor result = out.view(keepdim ? keep : reduced_sizes(x, dims, name));
  if (needs_grad({x})) {
    Shape sizes = x.sizes();
    double scale = mean ? static_cast<double>(keep.empty() ? 1 : numel_of(keep)) /
                              std::max<int64_t>(numel_of(sizes), 1)
                        : 1.0;
    record(name, {x}, result, [sizes, keep, scale](const Tensor& dy) {
      Tensor dx = dy.reshape(keep).expand(sizes).contiguous();
      return std::vector<Tensor>{scale == 1.0 ? dx : mul(dx, scale)};
    });
  }
  return result;
}

}  // namespace

namespace {

// sum_or_mean recorded as one op with its dims normalized.
Tensor traced_sum_or_mean(const Tensor& x, const Shape& dims, bool keepdim, bool mean, const char* name) {
  trace::OpScope trace(name);
  Tensor y = sum_or_mean(x, dims, keepdim, mean, name);
  if (trace.recording()) {
    Shape axes;
    for (int64_t d : dims) axes.push_back(normalize_dim(d, x.dim(), name));
    trace.record({x}, y, {{"dims", axes}, {"keepdim", int64_t{keepdim}}});
  }
  return y;
}

}  // namespace

Tensor sum(const Tensor& x) { return traced_sum_or_mean(x, all_dims(x), false, false, "sum"); }
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return traced_sum_or_mean(x, dims, keepdim, false, "sum");
}
Tensor mean(const Tensor& x) { return traced_sum_or_mean(x, all_dims(x), false, true, "mean"); }
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return traced_sum_or_mean(x, dims, keepdim, true, "mean");
}

namespace {

// max and min (`op`) over all elements need one.
void check_extremum(const Tensor& x, std::string_view op) {
  check_input(x, op);
  LOOM_CHECK(x.numel() > 0, ValueError,
             "[{}] of an empty tensor (shape {}) has no identity; pass a non-empty tensor", op,
             shape_str(x.sizes()));
}

// max and min (`op`) along `dim` need one element there; returns dim normalized.
int64_t check_extremum_dim(const Tensor& x, int64_t dim, std::string_view op) {
  check_input(x, op);
  const int64_t d = normalize_dim(dim, x.dim(), op);
  LOOM_CHECK(x.dim() == 0 || x.sizes()[d] > 0, ValueError,
             "[{}] dim {} of shape {} is empty; there is no {}imum to take", op, d, shape_str(x.sizes()), op);
  return d;
}

}  // namespace

Tensor max(const Tensor& x) {
  trace::OpScope trace("max");
  check_extremum(x, "max");
  Shape keep(x.dim(), 1);
  Tensor value = reduce_values(x, keep, kernel::ReduceOp::Max);
  Tensor result = value.view({});
  if (needs_grad({x})) {
    record("max", {x}, result, [x, value](const Tensor& dy) {
      // Ties share the gradient equally, as torch.max() over all elements does.
      Tensor mask = empty_like(x);
      LOOM_KERNEL(mask, binary, mask.strided(), x.strided(), value.expand(x.sizes()).strided(), kernel::BinaryOp::Equal);
      Tensor count = sum(mask);
      return std::vector<Tensor>{mul(mask, div(dy, count))};
    }, {x});
  }
  if (trace.recording()) trace.record({x}, result);
  return result;
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  trace::OpScope trace("max_dim");
  const int64_t d = check_extremum_dim(x, dim, "max");
  Shape keep = x.dim() == 0 ? Shape{} : kept_sizes(x, {d}, "max");
  Tensor values = empty(keep, x.options());
  Tensor indices = empty(keep, {.dtype = DType::Int64, .device = x.device()});
  if (x.dim() == 0) {
    values.copy_(x.detach());
    indices.zero_();
  } else {
    LOOM_KERNEL(x, max_along, values.strided(), indices.strided(), x.strided(), d);
  }
  Shape result_sizes = keep;
  if (!keepdim && x.dim() > 0) result_sizes.erase(result_sizes.begin() + d);
  ValuesIndices result{values.view(result_sizes), indices.view(result_sizes)};
  if (needs_grad({x})) {
    Shape sizes = x.sizes();
    record("max_dim", {x}, result.values, [sizes, keep, indices, d](const Tensor& dy) {
      Tensor dx = zeros(sizes, dy.options());
      if (sizes.empty()) return std::vector<Tensor>{dy.reshape(sizes)};
      LOOM_KERNEL(dx, scatter_add_along, dx.strided(), dy.reshape(keep).strided(), indices.strided(), d);
      return std::vector<Tensor>{dx};
    });
  }
  if (trace.recording()) {
    trace.record({x}, {result.values, result.indices}, {{"dim", d}, {"keepdim", int64_t{keepdim}}});
  }
  return result;
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return max(x, dim, keepdim).indices;
}

// Through max: -max(-x) keeps the first-occurrence index and the even split of ties.
Tensor min(const Tensor& x) {
  check_extremum(x, "min");
  return neg(max(neg(x)));
}

ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  check_extremum_dim(x, dim, "min");
  ValuesIndices negated = max(neg(x), dim, keepdim);
  return {neg(negated.values), negated.indices};
}

Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return min(x, dim, keepdim).indices;
}

namespace {

// `dims`, or every dim of x when it is empty.
Shape dims_or_all(const Tensor& x, const Shape& dims) { return dims.empty() ? all_dims(x) : dims; }

// How many elements of x are nonzero over `dims` (every dim when empty).
Tensor nonzero_count(const Tensor& x, const Shape& dims, bool keepdim, std::string_view op) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] x is an undefined tensor", op);
  return sum(ne(x, 0.0), dims_or_all(x, dims), keepdim);
}

// var and std (`op`): the sum of squared deviations over `dims` / (count - correction).
Tensor variance(const Tensor& x, const Shape& dims_in, bool keepdim, int64_t correction, std::string_view op) {
  check_input(x, op);
  LOOM_CHECK(correction >= 0, ValueError, "[{}] correction must be >= 0, got {}", op, correction);
  const Shape dims = dims_or_all(x, dims_in);
  const Shape keep = kept_sizes(x, dims, op);
  const int64_t count = numel_of(keep) == 0 ? 0 : x.numel() / numel_of(keep);
  // Two passes (the mean, then squared deviations from it): no cancellation.
  const Tensor deviation = x - mean(x, dims, true);
  const Tensor squares = sum(deviation * deviation, dims, keepdim);
  return div(squares, static_cast<double>(std::max<int64_t>(count - correction, 0)));
}

}  // namespace

Tensor var(const Tensor& x, const Shape& dims, bool keepdim, int64_t correction) {
  return variance(x, dims, keepdim, correction, "var");
}

Tensor std(const Tensor& x, const Shape& dims, bool keepdim, int64_t correction) {
  return sqrt(variance(x, dims, keepdim, correction, "std"));
}

Tensor logsumexp(const Tensor& x, const Shape& dims_in, bool keepdim) {
  check_input(x, "logsumexp");
  const Shape dims = dims_or_all(x, dims_in);
  const Shape keep = kept_sizes(x, dims, "logsumexp");
  LOOM_CHECK(x.numel() > 0, ValueError, "[logsumexp] of an empty tensor (shape {}); pass a non-empty tensor",
             shape_str(x.sizes()));
  // The shift m cancels in the value and the gradient, so it is taken without one;
  // an infinite m (every value -inf, or some +inf) is replaced by 0 so x - m is no NaN.
  Tensor shift = reduce_values(x.detach(), keep, kernel::ReduceOp::Max);
  shift = masked_fill(shift, abs(shift) == std::numeric_limits<double>::infinity(), 0.0);
  const Tensor total = sum(exp(x - shift), dims, keepdim);
  return log(total) + shift.reshape(total.sizes());
}

namespace {

// The norm's value over `dims` (kept as size 1), computed without a gradient.
Tensor norm_value(const Tensor& x, double ord, const Shape& dims) {
  NoGradGuard no_grad;
  if (ord == 0.0) return nonzero_count(x, dims, true, "vector_norm").to(x.dtype());
  const Tensor a = abs(x);
  if (std::isinf(ord)) {
    Tensor m = a;
    for (int64_t d : dims) m = ord > 0 ? max(m, d, true).values : min(m, d, true).values;
    return m;
  }
  if (ord == 1.0) return sum(a, dims, true);
  if (ord == 2.0) return sqrt(sum(x * x, dims, true));
  return pow(sum(pow(a, ord), dims, true), 1.0 / ord);
}

// d norm / dx times dy (both kept as size 1 over `dims`), as PyTorch's
// linalg_vector_norm_backward.
Tensor norm_backward(const Tensor& x, const Tensor& norm, const Tensor& dy, double ord, const Shape& dims) {
  if (ord == 0.0) return zeros_like(x);
  if (ord == 1.0) return mul(sign(x), dy);
  if (std::isinf(ord)) {
    const Tensor a = abs(x);
    const Tensor at_norm = logical_or(eq(a, norm), isnan(a)).to(x.dtype());
    return mul(sign(x), mul(at_norm, div(dy, sum(at_norm, dims, true))));
  }
  const Tensor scale = masked_fill(div(dy, ord == 2.0 ? norm : pow(norm, ord - 1.0)), eq(norm, 0.0), 0.0);
  if (ord == 2.0) return mul(x, scale);
  const Tensor scaled = masked_fill(mul(sign(x), pow(abs(x), ord - 1.0)), eq(x, 0.0), 0.0);
  return mul(scaled, scale);
}

}  // namespace

Tensor vector_norm(const Tensor& x, double ord, const Shape& dims_in, bool keepdim) {
  check_input(x, "vector_norm");
  LOOM_CHECK(ord >= 0.0 || ord == -std::numeric_limits<double>::infinity(), ValueError,
             "[vector_norm] ord must be >= 0, inf or -inf, got {}", ord);
  const Shape dims = dims_or_all(x, dims_in);
  const Shape keep = kept_sizes(x, dims, "vector_norm");
  if (std::isinf(ord)) {
    // As PyTorch: an empty x reduced over non-empty dims has an empty result;
    // only a reduction over no elements has no max or min.
    int64_t reduced = 1;
    for (int64_t d : dims) reduced *= x.size(d);
    LOOM_CHECK(reduced > 0, ValueError,
               "[vector_norm] ord {} of an empty reduction (x of shape {} over dims {}) has no value; "
               "reduce over non-empty dims or use a finite ord",
               ord, shape_str(x.sizes()), shape_str(dims));
  }
  const Tensor norm = norm_value(x, ord, dims);
  Tensor result = keepdim ? norm : norm.view(reduced_sizes(x, dims, "vector_norm"));
  if (needs_grad({x})) {
    // With keepdim, result is norm itself: the closure keeps a detached alias,
    // or the node would own the tensor that owns the node (a reference cycle).
    record("vector_norm", {x}, result, [x, norm = norm.detach(), ord, dims, keep](const Tensor& dy) {
      return std::vector<Tensor>{norm_backward(x, norm, dy.reshape(keep), ord, dims)};
    }, {x});
  }
  return result;
}

namespace {

// `dim` as a one-dim list, normalized for x (a 0-D x reduces over nothing).
Shape one_dim(const Tensor& x, int64_t dim, std::string_view op) {
  const int64_t d = normalize_dim(dim, x.dim(), op);
  return x.dim() == 0 ? Shape{} : Shape{d};
}

}  // namespace

Tensor any(const Tensor& x) { return gt(nonzero_count(x, {}, false, "any"), 0.0); }

Tensor any(const Tensor& x, int64_t dim, bool keepdim) {
  LOOM_CHECK(x.defined(), ValueError, "[any] x is an undefined tensor");
  const Shape dims = one_dim(x, dim, "any");
  if (dims.empty()) return ne(x, 0.0);
  return gt(nonzero_count(x, dims, keepdim, "any"), 0.0);
}

// All elements are nonzero where none is zero; counting zeros keeps an empty
// reduction true.
Tensor all(const Tensor& x) {
  LOOM_CHECK(x.defined(), ValueError, "[all] x is an undefined tensor");
  return eq(sum(eq(x, 0.0)), 0.0);
}

Tensor all(const Tensor& x, int64_t dim, bool keepdim) {
  LOOM_CHECK(x.defined(), ValueError, "[all] x is an undefined tensor");
  const Shape dims = one_dim(x, dim, "all");
  if (dims.empty()) return ne(x, 0.0);
  return eq(sum(eq(x, 0.0), dims, keepdim), 0.0);
}

Tensor count_nonzero(const Tensor& x, const Shape& dims) { return nonzero_count(x, dims, false, "count_nonzero"); }

namespace {

// The running sum or product of x along d, from the end when `reverse`; no gradient.
Tensor running(const Tensor& x, int64_t d, kernel::ScanOp op, bool reverse) {
  const Tensor in = x.device().is_cuda() ? x.detach().contiguous() : x.detach();  // the GPU kernel's layout
  Tensor out = empty(in.sizes(), in.options());
  if (in.dim() == 0) {
    out.copy_(in);
  } else {
    LOOM_KERNEL(in, scan_along, out.strided(), in.strided(), d, op, reverse);
  }
  return out;
}

// The product of the elements before (`reverse`: after) each one along d: 1 for
// the first (last) one.
Tensor exclusive_product(const Tensor& x, int64_t d, bool reverse) {
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (n <= 1) return ones_like(x);
  const Tensor inclusive = running(x, d, kernel::ScanOp::Prod, reverse);
  Shape one = x.sizes();
  one[d] = 1;
  const Tensor edge = ones(one, x.options());
  return reverse ? cat({inclusive.narrow(d, 1, n - 1), edge}, d) : cat({edge, inclusive.narrow(d, 0, n - 1)}, d);
}

// The input x of a running sum or product (`op`) in the result's dtype, checked;
// d normalized.
Tensor scan_input(const Tensor& x, int64_t& d, std::optional<DType> dtype, const char* op) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] x is an undefined tensor", op);
  d = normalize_dim(d, x.dim(), op);
  const DType out_dtype = dtype.value_or(is_floating(x.dtype()) ? x.dtype() : DType::Int64);
  LOOM_CHECK(out_dtype != DType::Bool, TypeError,
             "[{}] the result cannot be Bool; leave dtype out (a mask's is int64) or pass an integer or floating "
             "dtype", op);
  Tensor input = x.to(out_dtype);
  if (is_floating(out_dtype)) check_float_tensor(input, op);
  return input;
}

// The gradient of y = cumprod(x) along d, exact where x holds zeros: dx_k is the
// sum over i >= k of dy_i times the product of x_0..x_i without x_k. Before a
// line's first zero that is (running sum from the end of dy * y) / x_k, as
// PyTorch computes it everywhere when x has no zero; at the first zero it is the
// same sum for the running product with that zero replaced by 1; after it, 0.
Tensor cumprod_backward(const Tensor& x, const Tensor& y, const Tensor& dy, int64_t d) {
  const Tensor zeros_so_far = running(eq(x, 0.0).to(DType::Int64), d, kernel::ScanOp::Sum, false);
  const Tensor before_zero = eq(zeros_so_far, 0.0);
  const Tensor first_zero = logical_and(eq(x, 0.0), eq(zeros_so_far, 1.0));
  const Tensor before = div(running(mul(dy, y), d, kernel::ScanOp::Sum, true), masked_fill(x, ~before_zero, 1.0));
  const Tensor without_zero = running(masked_fill(x, first_zero, 1.0), d, kernel::ScanOp::Prod, false);
  const Tensor at_zero = running(mul(dy, without_zero), d, kernel::ScanOp::Sum, true);
  return where(before_zero, before, masked_fill(at_zero, ~first_zero, 0.0));
}

// cumsum or cumprod (`op`): the backward of a running sum is the running sum of
// dy from the end.
Tensor scan(const Tensor& x, int64_t dim, std::optional<DType> dtype, kernel::ScanOp op) {
  const char* name = op == kernel::ScanOp::Sum ? "cumsum" : "cumprod";
  trace::OpScope trace(name);
  int64_t d = dim;
  const Tensor input = scan_input(x, d, dtype, name);
  Tensor y = running(input, d, op, false);
  if (needs_grad({input}) && op == kernel::ScanOp::Sum) {
    record(name, {input}, y, [d](const Tensor& dy) {
      return std::vector<Tensor>{running(dy, d, kernel::ScanOp::Sum, true)};
    });
  } else if (needs_grad({input})) {  // a product's backward needs x and y; a sum's neither
    record(name, {input}, y, [x = input.detach(), y = y.detach(), d](const Tensor& dy) {
      return std::vector<Tensor>{x.dim() == 0 ? dy : cumprod_backward(x, y, dy, d)};
    });
  }
  if (trace.recording()) trace.record({x}, y, {{"dim", d}, {"dtype", std::string(dtype_name(input.dtype()))}});
  return y;
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return scan(x, dim, dtype, kernel::ScanOp::Sum);
}

Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return scan(x, dim, dtype, kernel::ScanOp::Prod);
}

namespace {

// The product along dim, or of every element when there is none. Its gradient is dy times the
// product of the other elements, taken as the products before and after each
// element, which is exact where x holds zeros (no division).
Tensor product(const Tensor& x, std::optional<int64_t> dim, bool keepdim, std::optional<DType> dtype,
               const char* name) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] x is an undefined tensor", name);
  const DType out_dtype = dtype.value_or(is_floating(x.dtype()) ? x.dtype() : DType::Int64);
  LOOM_CHECK(out_dtype != DType::Bool, TypeError, "[{}] the product cannot be Bool; pass an integer or floating dtype",
             name);
  if (!is_floating(out_dtype)) {
    // Integers multiply in float64, as sum() adds them: exact while the product
    // stays below 2^53 in magnitude.
    NoGradGuard no_grad;
    return product(x.to(DType::Float64), dim, keepdim, std::nullopt, name).to(out_dtype);
  }
  const Tensor input = x.to(out_dtype);
  check_float_tensor(input, name);
  if (!dim) return product(input.reshape({input.numel()}), 0, false, std::nullopt, name).reshape({});
  const int64_t d = *dim;
  const Shape keep = input.dim() == 0 ? Shape{} : kept_sizes(input, {d}, name);
  Tensor out = reduce_values(input, keep, kernel::ReduceOp::Prod);
  Shape result_sizes = keep;
  if (!keepdim && input.dim() > 0) result_sizes.erase(result_sizes.begin() + d);
  Tensor result = out.view(result_sizes);
  if (needs_grad({input})) {
    record(name, {input}, result, [input, keep, d](const Tensor& dy) {
      const Tensor x = input.detach();
      if (x.dim() == 0) return std::vector<Tensor>{dy.reshape({})};
      const Tensor others = mul(exclusive_product(x, d, false), exclusive_product(x, d, true));
      return std::vector<Tensor>{mul(dy.reshape(keep).expand(x.sizes()), others)};
    });
  }
  return result;
}

}  // namespace

Tensor prod(const Tensor& x, std::optional<DType> dtype) {
  trace::OpScope trace("prod");
  Tensor y = product(x, std::nullopt, false, dtype, "prod");
  if (trace.recording()) trace.record({x}, y, {{"dims", all_dims(x)}, {"keepdim", int64_t{0}}});
  return y;
}

Tensor prod(const Tensor& x, int64_t dim, bool keepdim, std::optional<DType> dtype) {
  trace::OpScope trace("prod");
  LOOM_CHECK(x.defined(), ValueError, "[prod] x is an undefined tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "prod");
  Tensor y = product(x, d, keepdim, dtype, "prod");
  if (trace.recording()) trace.record({x}, y, {{"dims", Shape{d}}, {"keepdim", int64_t{keepdim}}});
  return y;
}

Tensor sum_to(const Tensor& x, const Shape& sizes) {
  LOOM_CHECK(x.dim() >= static_cast<int64_t>(sizes.size()), ShapeError,
             "[sum_to] cannot sum shape {} down to {} with more dims", shape_str(x.sizes()),
             shape_str(sizes));
  int64_t lead = x.dim() - static_cast<int64_t>(sizes.size());
  Shape dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool leading = d < lead;
    if (leading || (sizes[d - lead] == 1 && x.sizes()[d] != 1)) {
      dims.push_back(d);
    } else {
      LOOM_CHECK(sizes[d - lead] == x.sizes()[d], ShapeError,
                 "[sum_to] shape {} does not broadcast to {}", shape_str(sizes),
                 shape_str(x.sizes()));
    }
  }
  if (dims.empty()) return x;
  return sum(x, dims, /*keepdim=*/true).reshape(sizes);
}

}  // namespace loom
