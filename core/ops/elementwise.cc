#include "core/ops/elementwise.h"

#include <limits>

#include "core/autograd.h"
#include "core/cpu/elementwise.h"
#include "core/error.h"
#include "core/ops/reduction.h"

namespace loom {

using cpu::BinaryOp;
using cpu::UnaryOp;

// --- validation ----------------------------------------------------------------

void check_float_tensor(const Tensor& x, std::string_view op, std::string_view arg) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] {} is an undefined tensor", op, arg);
  LOOM_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float64, TypeError,
             "[{}] {} has dtype {} but the op computes in float32 or float64; convert it with "
             ".to(DType::Float32)",
             op, arg, dtype_name(x.dtype()));
}

void check_same_dtype_device(const Tensor& a, const Tensor& b, std::string_view op) {
  LOOM_CHECK(a.dtype() == b.dtype(), TypeError,
             "[{}] operands have different dtypes, {} {} and {} {}; convert one with .to()", op,
             dtype_name(a.dtype()), shape_str(a.sizes()), dtype_name(b.dtype()),
             shape_str(b.sizes()));
  LOOM_CHECK(a.device() == b.device(), DeviceError,
             "[{}] operands are on different devices, {} and {}; move one with .to(Device)", op,
             a.device().str(), b.device().str());
}

void check_cpu(const Tensor& x, std::string_view op) {
  LOOM_CHECK(x.device().is_cpu(), DeviceError,
             "[{}] has no CUDA kernel in this build yet (tensor of shape {} is on {}); move it "
             "to the CPU with .cpu()",
             op, shape_str(x.sizes()), x.device().str());
}

namespace {

void check_operand(const Tensor& x, std::string_view op) {
  check_float_tensor(x, op);
  check_cpu(x, op);
}

// Layout of a result of shape `sizes`: channels-last when an operand of that
// shape is, so NHWC activations stay NHWC through elementwise ops.
Tensor empty_result(const Shape& sizes, const Tensor& a, const Tensor& b) {
  MemoryFormat format = MemoryFormat::Contiguous;
  if (a.sizes() == sizes) format = a.suggest_memory_format();
  else if (b.sizes() == sizes) format = b.suggest_memory_format();
  return empty(sizes, {.dtype = a.dtype(), .device = a.device(), .memory_format = format});
}

// Validates a broadcasting pair; returns the result tensor and both operands
// expanded to its shape (detached: the caller records the op).
struct BinaryArgs {
  Tensor out, a, b;
};

BinaryArgs prepare_binary(const Tensor& a, const Tensor& b, std::string_view name) {
  check_operand(a, name);
  check_operand(b, name);
  check_same_dtype_device(a, b, name);
  Shape sizes = broadcast_shapes(a.sizes(), b.sizes(), name);
  return {empty_result(sizes, a, b), a.detach().expand(sizes), b.detach().expand(sizes)};
}

// out = a op b with broadcasting, no autograd.
Tensor binary_values(const Tensor& a, const Tensor& b, BinaryOp op, std::string_view name) {
  BinaryArgs args = prepare_binary(a, b, name);
  cpu::binary(args.out.strided(), args.a.strided(), args.b.strided(), op);
  return args.out;
}

Tensor unary_values(const Tensor& x, UnaryOp op, std::string_view name) {
  check_operand(x, name);
  Tensor out = empty_like(x);
  cpu::unary(out.strided(), x.strided(), op);
  return out;
}

Tensor scalar_values(const Tensor& a, double s, BinaryOp op, std::string_view name,
                     bool scalar_first = false) {
  check_operand(a, name);
  Tensor out = empty_like(a);
  cpu::binary_scalar(out.strided(), a.strided(), s, op, scalar_first);
  return out;
}

// Gradient for an operand that may have been broadcast, or none if not needed.
Tensor reduce_grad(const Tensor& grad, const Tensor& input) {
  if (!input.requires_grad()) return Tensor();
  return sum_to(grad, input.sizes());
}

}  // namespace

// --- binary -----------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  BinaryArgs args = prepare_binary(a, b, "add");
  cpu::add_scaled(args.out.strided(), args.a.strided(), args.b.strided(), alpha);
  if (needs_grad({a, b})) {
    record("add", {a, b}, args.out, [a, b, alpha](const Tensor& dy) {
      Tensor db = b.requires_grad() ? reduce_grad(alpha == 1.0 ? dy : mul(dy, alpha), b) : Tensor();
      return std::vector<Tensor>{reduce_grad(dy, a), db};
    });
  }
  return args.out;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return add(a, b, -alpha); }

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_values(a, b, BinaryOp::Mul, "mul");
  if (needs_grad({a, b})) {
    record("mul", {a, b}, out, [a, b](const Tensor& dy) {
      return std::vector<Tensor>{a.requires_grad() ? reduce_grad(mul(dy, b), a) : Tensor(),
                                 b.requires_grad() ? reduce_grad(mul(dy, a), b) : Tensor()};
    }, {a, b});
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_values(a, b, BinaryOp::Div, "div");
  if (needs_grad({a, b})) {
    record("div", {a, b}, out, [a, b, out](const Tensor& dy) {
      Tensor da = a.requires_grad() ? reduce_grad(div(dy, b), a) : Tensor();
      Tensor db = b.requires_grad() ? reduce_grad(neg(div(mul(dy, out.detach()), b)), b) : Tensor();
      return std::vector<Tensor>{da, db};
    }, {a, b});
  }
  return out;
}

Tensor pow(const Tensor& x, const Tensor& exponent) {
  Tensor out = binary_values(x, exponent, BinaryOp::Pow, "pow");
  if (needs_grad({x, exponent})) {
    record("pow", {x, exponent}, out, [x, exponent, out](const Tensor& dy) {
      Tensor dx = x.requires_grad()
                      ? reduce_grad(mul(dy, mul(exponent, pow(x, sub(exponent, 1.0)))), x)
                      : Tensor();
      Tensor de = exponent.requires_grad()
                      ? reduce_grad(mul(dy, mul(out.detach(), log(x))), exponent)
                      : Tensor();
      return std::vector<Tensor>{dx, de};
    }, {x, exponent, out});
  }
  return out;
}

// --- with a scalar ------------------------------------------------------------------

Tensor add(const Tensor& a, double b) {
  Tensor out = scalar_values(a, b, BinaryOp::Add, "add");
  if (needs_grad({a})) record("add_scalar", {a}, out, [](const Tensor& dy) { return std::vector<Tensor>{dy}; });
  return out;
}

Tensor sub(const Tensor& a, double b) { return add(a, -b); }

Tensor mul(const Tensor& a, double b) {
  Tensor out = scalar_values(a, b, BinaryOp::Mul, "mul");
  if (needs_grad({a})) record("mul_scalar", {a}, out, [b](const Tensor& dy) { return std::vector<Tensor>{mul(dy, b)}; });
  return out;
}

Tensor div(const Tensor& a, double b) { return mul(a, 1.0 / b); }

Tensor rsub(const Tensor& a, double b) { return add(neg(a), b); }

Tensor rdiv(const Tensor& a, double b) {
  Tensor out = scalar_values(a, b, BinaryOp::Div, "rdiv", /*scalar_first=*/true);
  if (needs_grad({a})) {
    record("rdiv", {a}, out, [a, out](const Tensor& dy) {
      return std::vector<Tensor>{neg(div(mul(dy, out.detach()), a))};
    }, {a, out});
  }
  return out;
}

Tensor pow(const Tensor& x, double exponent) {
  Tensor out = scalar_values(x, exponent, BinaryOp::Pow, "pow");
  if (needs_grad({x})) {
    record("pow_scalar", {x}, out, [x, exponent](const Tensor& dy) {
      return std::vector<Tensor>{mul(dy, mul(pow(x, exponent - 1.0), exponent))};
    }, {x});
  }
  return out;
}

// --- unary ----------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  Tensor out = unary_values(x, UnaryOp::Neg, "neg");
  if (needs_grad({x})) record("neg", {x}, out, [](const Tensor& dy) { return std::vector<Tensor>{neg(dy)}; });
  return out;
}

Tensor exp(const Tensor& x) {
  Tensor out = unary_values(x, UnaryOp::Exp, "exp");
  if (needs_grad({x})) {
    record("exp", {x}, out, [y = out.detach()](const Tensor& dy) { return std::vector<Tensor>{mul(dy, y)}; }, {out});
  }
  return out;
}

Tensor log(const Tensor& x) {
  Tensor out = unary_values(x, UnaryOp::Log, "log");
  if (needs_grad({x})) record("log", {x}, out, [x](const Tensor& dy) { return std::vector<Tensor>{div(dy, x)}; }, {x});
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = unary_values(x, UnaryOp::Sqrt, "sqrt");
  if (needs_grad({x})) {
    record("sqrt", {x}, out, [y = out.detach()](const Tensor& dy) {
      return std::vector<Tensor>{div(dy, mul(y, 2.0))};
    }, {out});
  }
  return out;
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_operand(x, "clamp");
  LOOM_CHECK(min || max, ValueError, "[clamp] needs at least one of min and max");
  double lo = min.value_or(-std::numeric_limits<double>::infinity());
  double hi = max.value_or(std::numeric_limits<double>::infinity());
  LOOM_CHECK(lo <= hi, ValueError, "[clamp] min {} is greater than max {}", lo, hi);
  Tensor out = empty_like(x);
  cpu::clamp(out.strided(), x.strided(), lo, hi);
  if (needs_grad({x})) {
    record("clamp", {x}, out, [x, lo, hi](const Tensor& dy) {
      Tensor dx = empty_like(x);
      cpu::clamp_backward(dx.strided(), dy.strided(), x.strided(), lo, hi);
      return std::vector<Tensor>{dx};
    }, {x});
  }
  return out;
}

// --- operators --------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return rdiv(b, a); }
Tensor operator-(const Tensor& x) { return neg(x); }

// --- in place ----------------------------------------------------------------------------

namespace {

Tensor broadcast_into(const Tensor& self, const Tensor& other, std::string_view op) {
  check_operand(self, op);
  check_operand(other, op);
  check_same_dtype_device(self, other, op);
  LOOM_CHECK(broadcast_shapes(self.sizes(), other.sizes(), op) == self.sizes(), ShapeError,
             "[{}] the operand of shape {} does not broadcast to the destination's shape {}", op,
             shape_str(other.sizes()), shape_str(self.sizes()));
  check_inplace(self, op);
  return other.detach().expand(self.sizes());
}

}  // namespace

Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  Tensor b = broadcast_into(self, other, "add_");
  cpu::add_scaled(self.strided(), self.strided(), b.strided(), alpha);
  return self;
}

Tensor& sub_(Tensor& self, const Tensor& other, double alpha) { return add_(self, other, -alpha); }

Tensor& mul_(Tensor& self, const Tensor& other) {
  Tensor b = broadcast_into(self, other, "mul_");
  cpu::binary(self.strided(), self.strided(), b.strided(), BinaryOp::Mul);
  return self;
}

Tensor& div_(Tensor& self, const Tensor& other) {
  Tensor b = broadcast_into(self, other, "div_");
  cpu::binary(self.strided(), self.strided(), b.strided(), BinaryOp::Div);
  return self;
}

Tensor& add_(Tensor& self, double value) {
  check_operand(self, "add_");
  check_inplace(self, "add_");
  cpu::binary_scalar(self.strided(), self.strided(), value, BinaryOp::Add);
  return self;
}

Tensor& mul_(Tensor& self, double value) {
  check_operand(self, "mul_");
  check_inplace(self, "mul_");
  cpu::binary_scalar(self.strided(), self.strided(), value, BinaryOp::Mul);
  return self;
}

}  // namespace loom
