// File: core/ops/compare.cc
// Comparisons into Bool masks, where and masked_fill, with device dispatch.
#include "core/ops/compare.h"

#include <string_view>

#include "core/autograd.h"
#include "core/cpu/compare.h"
#include "core/error.h"
#include "core/ops/dispatch.h"
#include "core/ops/reduction.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/compare.h"
#endif

namespace loom {

using cpu::CompareOp;

namespace {

std::string_view op_name(CompareOp op) {
  switch (op) {
    case CompareOp::Eq: return "eq";
    case CompareOp::Ne: return "ne";
    case CompareOp::Lt: return "lt";
    case CompareOp::Le: return "le";
    case CompareOp::Gt: return "gt";
    case CompareOp::Ge: return "ge";
  }
  return "compare";
}

void check_defined(const Tensor& t, std::string_view op, std::string_view arg) {
  LOOM_CHECK(t.defined(), ValueError, "[{}] {} is an undefined tensor", op, arg);
}

void check_same_device(const Tensor& a, const Tensor& b, std::string_view op) {
  LOOM_CHECK(a.device() == b.device(), DeviceError,
             "[{}] operands are on {} and {}; move one with .to(device)", op,
             a.device().str(), b.device().str());
}

// The dtype two compared operands meet in: a floating dtype wins (the wider
// one), integers and Bool meet in int64.
DType common_dtype(DType a, DType b) {
  if (a == b) return a;
  if (is_floating(a) && is_floating(b)) {
    return a == DType::Float64 || b == DType::Float64 ? DType::Float64 : DType::Float32;
  }
  if (is_floating(a)) return a;
  if (is_floating(b)) return b;
  return DType::Int64;
}

Tensor compare(const Tensor& a_in, const Tensor& b_in, CompareOp op) {
  const std::string_view name = op_name(op);
  check_defined(a_in, name, "a");
  check_defined(b_in, name, "b");
  check_same_device(a_in, b_in, name);
  const DType dtype = common_dtype(a_in.dtype(), b_in.dtype());
  const Tensor a = a_in.detach().to(dtype), b = b_in.detach().to(dtype);
  const Shape sizes = broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = empty(sizes, {.dtype = DType::Bool, .device = a.device()});
  LOOM_KERNEL(out, compare, out.strided(), a.expand(sizes).strided(),
                      b.expand(sizes).strided(), op);
  return out;
}

Tensor compare(const Tensor& a, double b, CompareOp op) {
  check_defined(a, op_name(op), "a");
  Tensor out = empty(a.sizes(), {.dtype = DType::Bool, .device = a.device()});
  LOOM_KERNEL(out, compare_scalar, out.strided(), a.detach().strided(), b, op);
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

}  // namespace

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
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_defined(x, "masked_fill", "x");
  check_mask(mask, "masked_fill", x);
  LOOM_CHECK(broadcast_shapes(mask.sizes(), x.sizes(), "masked_fill") == x.sizes(), ShapeError,
             "[masked_fill] the mask of shape {} does not broadcast to x's shape {}",
             shape_str(mask.sizes()), shape_str(x.sizes()));
  return where(mask, full({}, value, x.options()), x);
}

}  // namespace loom
