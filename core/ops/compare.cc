// File: core/ops/compare.cc
// Comparisons into Bool masks, logical ops on them, closeness, where and
// masked_fill, with device dispatch; maximum and minimum are composites of
// comparisons and where.
#include "core/ops/compare.h"

#include <fmt/format.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/cpu/compare.h"
#include "core/cuda/compare.h"
#include "core/error.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/trace.h"

namespace loom {

using kernel::CompareOp;

namespace {

// The op's name in messages and traces, against a tensor or a scalar.
const char* op_name(CompareOp op, bool scalar = false) {
  switch (op) {
    case CompareOp::Eq: return scalar ? "eq_scalar" : "eq";
    case CompareOp::Ne: return scalar ? "ne_scalar" : "ne";
    case CompareOp::Lt: return scalar ? "lt_scalar" : "lt";
    case CompareOp::Le: return scalar ? "le_scalar" : "le";
    case CompareOp::Gt: return scalar ? "gt_scalar" : "gt";
    case CompareOp::Ge: return scalar ? "ge_scalar" : "ge";
  }
  return "compare";
}

// The scalar as a floating dtype holds it: PyTorch compares a tensor with a
// number in the tensor's dtype, so a float32 x holding 0.1f equals 0.1.
double in_dtype(double value, DType dtype) {
  if (!is_floating(dtype)) return value;
  return visit_dtype(dtype, [&]<class T>() { return to_double(from_double<T>(value)); });
}

bool is_fractional(double value) { return std::isfinite(value) && value != std::trunc(value); }

// out, recorded as the op's output when the op is the outermost one traced.
Tensor recorded(trace::OpScope& trace, std::vector<Tensor> inputs, Tensor out) {
  if (trace.recording()) trace.record(std::move(inputs), out);
  return out;
}

void check_defined(const Tensor& t, std::string_view op, std::string_view arg) {
  LOOM_CHECK(t.defined(), ValueError, "[{}] {} is an undefined tensor", op, arg);
}

void check_same_device(const Tensor& a, const Tensor& b, std::string_view op) {
  LOOM_CHECK(a.device() == b.device(), DeviceError,
             "[{}] operands are on {} and {}; move one with .to(device)", op,
             a.device().str(), b.device().str());
}

Tensor compare(const Tensor& a_in, const Tensor& b_in, CompareOp op) {
  const char* name = op_name(op);
  trace::OpScope trace(name);
  check_defined(a_in, name, "a");
  check_defined(b_in, name, "b");
  check_same_device(a_in, b_in, name);
  const DType dtype = promote_types(a_in.dtype(), b_in.dtype());
  const Tensor a = a_in.detach().to(dtype), b = b_in.detach().to(dtype);
  const Shape sizes = broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = empty(sizes, {.dtype = DType::Bool, .device = a.device()});
  LOOM_KERNEL(out, compare, out.strided(), a.expand(sizes).strided(),
                      b.expand(sizes).strided(), op);
  if (trace.recording()) trace.record({a_in, b_in}, out);
  return out;
}

Tensor compare(const Tensor& a, double b, CompareOp op) {
  trace::OpScope trace(op_name(op, /*scalar=*/true));
  check_defined(a, op_name(op), "a");
  const DType dtype = scalar_comparison_dtype(a.dtype(), b);
  // Float64 for an integer x means exact: the kernel compares its values in double, uncopied.
  const Tensor values = is_floating(a.dtype()) || dtype == DType::Float64 ? a.detach() : a.detach().to(dtype);
  Tensor out = empty(a.sizes(), {.dtype = DType::Bool, .device = a.device()});
  LOOM_KERNEL(out, compare_scalar, out.strided(), values.strided(), in_dtype(b, values.dtype()), op);
  if (trace.recording()) trace.record({a}, out, {{"scalar", b}});
  return out;
}

// cond ? a : b without autograd; the three already broadcast to `sizes`.
Tensor select_values(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& sizes) {
  Tensor out = empty(sizes, a.options());
  LOOM_KERNEL(out, where, out.strided(), cond.expand(sizes).strided(),
                      a.detach().expand(sizes).strided(), b.detach().expand(sizes).strided());
  return out;
}

void check_mask(const Tensor& mask, std::string_view op, const Tensor& like) {
  check_defined(mask, op, "mask");
  LOOM_CHECK(mask.dtype() == DType::Bool, TypeError,
             "[{}] the mask has dtype {} but must be bool; build it with a comparison such as "
             "x > 0, or convert it with .to(DType::Bool)",
             op, dtype_name(mask.dtype()));
  check_same_device(mask, like, op);
}

// x as a mask: itself when Bool, else x != 0 (NaN is nonzero, so true).
Tensor truth(const Tensor& x, std::string_view op) {
  check_defined(x, op, "input");
  return x.dtype() == DType::Bool ? x.detach() : x.detach().to(DType::Bool);
}

// Both operands as masks, on one device, broadcast to one shape.
std::pair<Tensor, Tensor> truth_pair(const Tensor& a, const Tensor& b, std::string_view op) {
  Tensor ta = truth(a, op), tb = truth(b, op);
  check_same_device(ta, tb, op);
  const Shape sizes = broadcast_shapes(ta.sizes(), tb.sizes(), op);
  return {ta.expand(sizes), tb.expand(sizes)};
}

void check_masks(std::initializer_list<Tensor> operands, std::string_view op) {
  std::string given;
  bool all_bool = true;
  for (const Tensor& t : operands) {
    check_defined(t, op, "operand");
    all_bool = all_bool && t.dtype() == DType::Bool;
    given += fmt::format("{}{} {}", given.empty() ? "" : " and ", dtype_name(t.dtype()),
                         shape_str(t.sizes()));
  }
  LOOM_CHECK(all_bool, TypeError,
             "[{}] takes Bool masks, got {}; Loom has no integer bitwise ops: use logical_and / "
             "logical_or / logical_xor / logical_not for truth values, or build a mask with a "
             "comparison such as x != 0",
             op, given);
}

}  // namespace

DType scalar_comparison_dtype(DType dtype, double scalar) {
  if (is_floating(dtype)) return dtype;
  return is_fractional(scalar) ? DType::Float32 : DType::Float64;
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(a, b, CompareOp::Eq); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(a, b, CompareOp::Ne); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(a, b, CompareOp::Lt); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(a, b, CompareOp::Le); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(a, b, CompareOp::Gt); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(a, b, CompareOp::Ge); }
Tensor eq(const Tensor& a, double b) { return compare(a, b, CompareOp::Eq); }
Tensor ne(const Tensor& a, double b) { return compare(a, b, CompareOp::Ne); }
Tensor lt(const Tensor& a, double b) { return compare(a, b, CompareOp::Lt); }
Tensor le(const Tensor& a, double b) { return compare(a, b, CompareOp::Le); }
Tensor gt(const Tensor& a, double b) { return compare(a, b, CompareOp::Gt); }
Tensor ge(const Tensor& a, double b) { return compare(a, b, CompareOp::Ge); }

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  trace::OpScope trace("where");
  check_defined(a, "where", "a");
  check_defined(b, "where", "b");
  check_mask(cond, "where", a);
  check_same_device(a, b, "where");
  LOOM_CHECK(a.dtype() == b.dtype(), TypeError,
             "[where] a has dtype {} and b {}; convert one with .to() so they match",
             dtype_name(a.dtype()), dtype_name(b.dtype()));
  const Shape sizes =
      broadcast_shapes(cond.sizes(), broadcast_shapes(a.sizes(), b.sizes(), "where"), "where");
  Tensor out = select_values(cond, a, b, sizes);
  if (needs_grad({a, b})) {
    const Shape a_sizes = a.sizes(), b_sizes = b.sizes();
    const bool grad_a = a.requires_grad(), grad_b = b.requires_grad();
    record("where", {a, b}, out, [cond, a_sizes, b_sizes, grad_a, grad_b](const Tensor& dy) {
      const Tensor zero = zeros({}, dy.options());
      const Shape sizes = dy.sizes();
      Tensor da, db;
      if (grad_a) da = sum_to(select_values(cond, dy, zero, sizes), a_sizes);
      if (grad_b) db = sum_to(select_values(cond, zero, dy, sizes), b_sizes);
      return std::vector<Tensor>{da, db};
    });
  }
  if (trace.recording()) trace.record({cond, a, b}, out);
  return out;
}

// The logical ops are selections between masks, so they run on the where and
// comparison kernels of both backends: a and b = a ? b : false, a or b =
// a ? true : b, a xor b = a != b, not a = a == false.
Tensor logical_and(const Tensor& a, const Tensor& b) {
  trace::OpScope trace("logical_and");
  auto [ta, tb] = truth_pair(a, b, "logical_and");
  return recorded(trace, {a, b}, select_values(ta, tb, ta, ta.sizes()));
}

Tensor logical_or(const Tensor& a, const Tensor& b) {
  trace::OpScope trace("logical_or");
  auto [ta, tb] = truth_pair(a, b, "logical_or");
  return recorded(trace, {a, b}, select_values(ta, ta, tb, ta.sizes()));
}

Tensor logical_xor(const Tensor& a, const Tensor& b) {
  trace::OpScope trace("logical_xor");
  auto [ta, tb] = truth_pair(a, b, "logical_xor");
  return recorded(trace, {a, b}, compare(ta, tb, CompareOp::Ne));
}

Tensor logical_not(const Tensor& x) {
  trace::OpScope trace("logical_not");
  return recorded(trace, {x}, compare(truth(x, "logical_not"), 0.0, CompareOp::Eq));
}

Tensor operator&(const Tensor& a, const Tensor& b) {
  check_masks({a, b}, "operator&");
  return logical_and(a, b);
}

Tensor operator|(const Tensor& a, const Tensor& b) {
  check_masks({a, b}, "operator|");
  return logical_or(a, b);
}

Tensor operator^(const Tensor& a, const Tensor& b) {
  check_masks({a, b}, "operator^");
  return logical_xor(a, b);
}

Tensor operator~(const Tensor& x) {
  check_masks({x}, "operator~");
  return logical_not(x);
}

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  trace::OpScope trace("isclose");
  check_defined(a, "isclose", "a");
  check_defined(b, "isclose", "b");
  check_same_device(a, b, "isclose");
  LOOM_CHECK(a.dtype() == b.dtype(), TypeError,
             "[isclose] a has dtype {} and b {}; they must match, as in torch.isclose: convert "
             "one with .to()",
             dtype_name(a.dtype()), dtype_name(b.dtype()));
  LOOM_CHECK(rtol >= 0 && atol >= 0, ValueError,
             "[isclose] rtol and atol must be >= 0, got rtol {} and atol {}", rtol, atol);
  const Shape sizes = broadcast_shapes(a.sizes(), b.sizes(), "isclose");
  Tensor out = empty(sizes, {.dtype = DType::Bool, .device = a.device()});
  LOOM_KERNEL(out, isclose, out.strided(), a.detach().expand(sizes).strided(),
              b.detach().expand(sizes).strided(), rtol, atol, equal_nan);
  if (trace.recording()) {
    trace.record({a, b}, out, {{"rtol", rtol}, {"atol", atol}, {"equal_nan", int64_t{equal_nan}}});
  }
  return out;
}

namespace {

// Whether every element of a Bool mask is true (one value read back).
bool all_true(const Tensor& mask) {
  return mask.numel() == 0 || compare(mask, 0.0, CompareOp::Eq).sum().item() == 0;
}

}  // namespace

Tensor isnan(const Tensor& x) {
  check_defined(x, "isnan", "x");
  return is_floating(x.dtype()) ? ne(x, x) : zeros(x.sizes(), {.dtype = DType::Bool, .device = x.device()});
}

Tensor isinf(const Tensor& x) {
  check_defined(x, "isinf", "x");
  if (!is_floating(x.dtype())) return zeros(x.sizes(), {.dtype = DType::Bool, .device = x.device()});
  NoGradGuard no_grad;  // the mask carries no gradient; x itself (not a detached copy) keeps the trace whole
  return eq(abs(x), std::numeric_limits<double>::infinity());
}

Tensor isposinf(const Tensor& x) {
  check_defined(x, "isposinf", "x");
  return eq(x, std::numeric_limits<double>::infinity());
}

Tensor isneginf(const Tensor& x) {
  check_defined(x, "isneginf", "x");
  return eq(x, -std::numeric_limits<double>::infinity());
}

// Neither NaN (which equals nothing) nor infinite.
Tensor isfinite(const Tensor& x) {
  check_defined(x, "isfinite", "x");
  if (!is_floating(x.dtype())) return ones(x.sizes(), {.dtype = DType::Bool, .device = x.device()});
  NoGradGuard no_grad;
  return lt(abs(x), std::numeric_limits<double>::infinity());
}

namespace {

// The largest finite value of a floating dtype (torch.finfo(dtype).max).
double max_finite(DType dtype) {
  switch (dtype) {
    case DType::Float64: return std::numeric_limits<double>::max();
    case DType::BFloat16: return 3.3895313892515355e38;  // (2 - 2^-7) * 2^127
    case DType::Float16: return 65504.0;                 // (2 - 2^-10) * 2^15
    default: return std::numeric_limits<float>::max();
  }
}

}  // namespace

Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf) {
  check_defined(x, "nan_to_num", "x");
  if (!is_floating(x.dtype())) return x.clone();
  const double inf = std::numeric_limits<double>::infinity();
  const double largest = max_finite(x.dtype());
  const Tensor replaced = masked_fill(masked_fill(x, ne(x, x), nan), eq(x, inf), posinf.value_or(largest));
  return masked_fill(replaced, eq(x, -inf), neginf.value_or(-largest));
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return all_true(isclose(a, b, rtol, atol, equal_nan));
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined(a, "equal", "a");
  check_defined(b, "equal", "b");
  if (a.sizes() != b.sizes()) return false;
  return all_true(eq(a, b));
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  trace::OpScope trace("masked_fill");
  check_defined(x, "masked_fill", "x");
  check_mask(mask, "masked_fill", x);
  LOOM_CHECK(broadcast_shapes(mask.sizes(), x.sizes(), "masked_fill") == x.sizes(), ShapeError,
             "[masked_fill] the mask of shape {} does not broadcast to x's shape {}",
             shape_str(mask.sizes()), shape_str(x.sizes()));
  Tensor out = where(mask, full({}, value, x.options()), x);
  if (trace.recording()) trace.record({x, mask}, out, {{"value", value}});
  return out;
}

namespace {

// maximum (larger) or minimum (`op`): a where a wins, b where b wins, and where
// neither does (a tie, or a NaN) a / 2 + b / 2, which is the tied value (or
// NaN) and gives each operand half the gradient.
Tensor extremum(const Tensor& a, const Tensor& b, bool larger, const char* op) {
  trace::OpScope trace(op);
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  check_same_device(a, b, op);
  LOOM_CHECK(a.dtype() == b.dtype(), TypeError, "[{}] a has dtype {} and b {}; convert one with .to() so they match",
             op, dtype_name(a.dtype()), dtype_name(b.dtype()));
  const Tensor a_wins = larger ? gt(a, b) : lt(a, b);
  if (!is_floating(a.dtype())) return recorded(trace, {a, b}, where(a_wins, a, b));
  const Tensor b_wins = larger ? lt(a, b) : gt(a, b);
  return recorded(trace, {a, b}, where(a_wins, a, where(b_wins, b, a * 0.5 + b * 0.5)));
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(a, b, true, "maximum"); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(a, b, false, "minimum"); }

}  // namespace loom
