// File: core/ops/elementwise.cc
// Elementwise arithmetic, unary math and in-place updates: validation, dtype
// promotion, dispatch, and each op's backward beside its forward.
#include "core/ops/elementwise.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/cpu/elementwise.h"
#include "core/cuda/counter.h"
#include "core/ops/dispatch.h"
#include "core/trace.h"

#include "core/error.h"
#include "core/ops/compare.h"
#include "core/ops/reduction.h"

namespace loom {

using kernel::BinaryOp;
using kernel::UnaryOp;

// --- validation ----------------------------------------------------------------

bool is_half_precision(DType dtype) { return dtype == DType::BFloat16 || dtype == DType::Float16; }

void check_float_tensor(const Tensor& x, std::string_view op, std::string_view arg) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] {} is an undefined tensor", op, arg);
  LOOM_CHECK(!is_half_precision(x.dtype()) || x.device().is_cuda(), TypeError,
             "[{}] {} has dtype {} on the CPU, but bfloat16 and float16 are GPU-only in Loom (the "
             "CPU reference computes in float32 or float64); convert it with .to(DType::Float32) "
             "or move it to the GPU with .to(Device::cuda())",
             op, arg, dtype_name(x.dtype()));
  const bool computable = x.dtype() == DType::Float32 || x.dtype() == DType::Float64 ||
                          is_half_precision(x.dtype());
  LOOM_CHECK(computable, TypeError,
             "[{}] {} has dtype {} but the op computes in float32 or float64 (or bfloat16 / "
             "float16 on the GPU); convert it with .to(DType::Float32)",
             op, arg, dtype_name(x.dtype()));
}

std::pair<Tensor, Tensor> promote_operands(const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype() || !is_floating(a.dtype()) || !is_floating(b.dtype())) return {a, b};
  const DType common = promote_types(a.dtype(), b.dtype());
  return {a.to(common), b.to(common)};
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

bool is_integral(const Tensor& t) { return t.defined() && !is_floating(t.dtype()); }

// An integer or Bool operand meeting a floating one takes its dtype (uint8 pixels
// times a float32 scale), and a true division of two integer tensors computes in
// float32, PyTorch's default dtype; an integer result has no kernel here, so two
// integer operands of add, sub or mul stay as they are, for the dtype check.
std::pair<Tensor, Tensor> promote_integers(const Tensor& a, const Tensor& b, bool true_division) {
  if (!a.defined() || !b.defined()) return {a, b};  // check_float_tensor names the undefined one
  if (is_integral(a) && is_integral(b)) {
    return true_division ? std::pair{a.to(DType::Float32), b.to(DType::Float32)} : std::pair{a, b};
  }
  if (is_integral(a)) return {a.to(b.dtype()), b};
  if (is_integral(b)) return {a, b.to(a.dtype())};
  return {a, b};
}

// Validates both operands of a binary op and brings them to one dtype as PyTorch
// promotes: integers to the floating operand's dtype (promote_integers), a narrower
// floating operand to the wider one (bf16 + fp32 -> fp32, fp32 + fp64 -> fp64),
// differentiably.
std::pair<Tensor, Tensor> promote_binary(const Tensor& a_in, const Tensor& b_in, std::string_view name,
                                         bool true_division = false) {
  const auto [a, b] = promote_integers(a_in, b_in, true_division);
  check_float_tensor(a, name);
  check_float_tensor(b, name);
  return promote_operands(a, b);
}

// An integer or Bool tensor meeting a number: float32 where PyTorch's result is
// floating (a true division, or a number with a fraction: labels * 0.5); an
// integral number keeps PyTorch's integer result, which has no kernel here, so
// the tensor stays as it is, for the dtype check.
Tensor promote_for_scalar(const Tensor& a, double s, bool true_division = false) {
  if (!is_integral(a) || (!true_division && std::trunc(s) == s)) return a;
  return a.to(DType::Float32);
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
// expanded to its shape (detached: the caller records the op). The operands
// must have been promoted to one dtype (promote_binary).
struct BinaryArgs {
  Tensor out, a, b;
};

BinaryArgs prepare_binary(const Tensor& a, const Tensor& b, std::string_view name) {
  check_same_dtype_device(a, b, name);
  Shape sizes = broadcast_shapes(a.sizes(), b.sizes(), name);
  return {empty_result(sizes, a, b), a.detach().expand(sizes), b.detach().expand(sizes)};
}

// out = a op b with broadcasting, no autograd.
Tensor binary_values(const Tensor& a, const Tensor& b, BinaryOp op, std::string_view name) {
  BinaryArgs args = prepare_binary(a, b, name);
  LOOM_KERNEL(args.out, binary, args.out.strided(), args.a.strided(), args.b.strided(), op);
  return args.out;
}

Tensor unary_values(const Tensor& x, UnaryOp op, std::string_view name) {
  check_float_tensor(x, name);
  Tensor out = empty_like(x);
  LOOM_KERNEL(out, unary, out.strided(), x.strided(), op);
  return out;
}

Tensor scalar_values(const Tensor& a, double s, BinaryOp op, std::string_view name,
                     bool scalar_first = false) {
  check_float_tensor(a, name);
  Tensor out = empty_like(a);
  LOOM_KERNEL(out, binary_scalar, out.strided(), a.strided(), s, op, scalar_first);
  return out;
}

// Gradient for an operand that may have been broadcast, or none if not needed.
Tensor reduce_grad(const Tensor& grad, const Tensor& input) {
  if (!input.requires_grad()) return Tensor();
  return sum_to(grad, input.sizes());
}

}  // namespace

// --- binary -----------------------------------------------------------------------

namespace {

Tensor add_scaled_op(const Tensor& a_in, const Tensor& b_in, double alpha, const char* name) {
  const auto operands = promote_binary(a_in, b_in, name);
  const Tensor &a = operands.first, &b = operands.second;
  BinaryArgs args = prepare_binary(a, b, name);
  LOOM_KERNEL(args.out, add_scaled, args.out.strided(), args.a.strided(), args.b.strided(), alpha);
  if (needs_grad({a, b})) {
    // Only the operands' sizes: holding a and b would keep a residual branch's
    // activation alive until the backward, which nothing else saves.
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record(name, {a, b}, args.out,
           [a_sizes = a.sizes(), b_sizes = b.sizes(), need_a, need_b, alpha](const Tensor& dy) {
             Tensor da = need_a ? sum_to(dy, a_sizes) : Tensor();
             Tensor db = need_b ? sum_to(alpha == 1.0 ? dy : mul(dy, alpha), b_sizes) : Tensor();
             return std::vector<Tensor>{da, db};
           });
  }
  return args.out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  trace::OpScope trace("add");
  if (trace.substituting()) {  // fusion by tracing: a residual add may end a fused chain
    if (auto y = trace.substitute({a, b}, {{"alpha", alpha}})) return *y;
  }
  Tensor out = add_scaled_op(a, b, alpha, "add");
  if (trace.recording()) trace.record({a, b}, out, {{"alpha", alpha}});
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  trace::OpScope trace("sub");
  Tensor out = add_scaled_op(a, b, -alpha, "sub");
  if (trace.recording()) trace.record({a, b}, out, {{"alpha", alpha}});
  return out;
}

namespace {

// A Bool operand of mul meets the other as PyTorch's type promotion has it: two
// masks give their logical and, a mask and a floating tensor the floating
// dtype (0 or 1 per element; the mask gets no gradient).
std::pair<Tensor, Tensor> unmask_operands(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return {a, b};  // promote_binary says which is undefined
  const bool a_mask = a.dtype() == DType::Bool, b_mask = b.dtype() == DType::Bool;
  if (a_mask == b_mask) return {a, b};
  return a_mask ? std::pair{a.to(b.dtype()), b} : std::pair{a, b.to(a.dtype())};
}

bool both_masks(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() == DType::Bool && b.dtype() == DType::Bool;
}

}  // namespace

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  trace::OpScope trace("mul");
  if (both_masks(a_in, b_in)) {
    Tensor out = logical_and(a_in, b_in);
    if (trace.recording()) trace.record({a_in, b_in}, out);
    return out;
  }
  const auto unmasked = unmask_operands(a_in, b_in);
  const auto operands = promote_binary(unmasked.first, unmasked.second, "mul");
  const Tensor &a = operands.first, &b = operands.second;
  Tensor out = binary_values(a, b, BinaryOp::Mul, "mul");
  if (needs_grad({a, b})) {
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record("mul", {a, b}, out, [a, b, need_a, need_b](const Tensor& dy) {
      return std::vector<Tensor>{need_a ? reduce_grad(mul(dy, b), a) : Tensor(),
                                 need_b ? reduce_grad(mul(dy, a), b) : Tensor()};
    }, {need_a ? b : Tensor(), need_b ? a : Tensor()});
  }
  if (trace.recording()) trace.record({a_in, b_in}, out);
  return out;
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  trace::OpScope trace("div");
  const auto operands = promote_binary(a_in, b_in, "div", /*true_division=*/true);
  const Tensor &a = operands.first, &b = operands.second;
  Tensor out = binary_values(a, b, BinaryOp::Div, "div");
  if (needs_grad({a, b})) {
    record("div", {a, b}, out, [a, b, y = out.detach()](const Tensor& dy) {
      Tensor da = a.requires_grad() ? reduce_grad(div(dy, b), a) : Tensor();
      Tensor db = b.requires_grad() ? reduce_grad(neg(div(mul(dy, y), b)), b) : Tensor();
      return std::vector<Tensor>{da, db};
    }, {a, b});
  }
  if (trace.recording()) trace.record({a_in, b_in}, out);
  return out;
}

Tensor pow(const Tensor& x_in, const Tensor& exponent_in) {
  trace::OpScope trace("pow");
  const auto [x, exponent] = promote_binary(x_in, exponent_in, "pow");
  check_cpu(x, "pow");  // its masked backward kernel exists on the CPU only
  Tensor out = binary_values(x, exponent, BinaryOp::Pow, "pow");
  if (needs_grad({x, exponent})) {
    record("pow", {x, exponent}, out, [x, exponent, y = out.detach()](const Tensor& dy) {
      const Shape& sizes = y.sizes();
      Tensor dx = empty(sizes, y.options()), de = empty(sizes, y.options());
      cpu::pow_backward(dx.strided(), de.strided(), dy.strided(), x.detach().expand(sizes).strided(),
                        exponent.detach().expand(sizes).strided(), y.strided());
      return std::vector<Tensor>{reduce_grad(dx, x), reduce_grad(de, exponent)};
    }, {x, exponent, out});
  }
  if (trace.recording()) trace.record({x_in, exponent_in}, out);
  return out;
}

// --- with a scalar ------------------------------------------------------------------

Tensor add(const Tensor& a_in, double b) {
  trace::OpScope trace("add_scalar");
  const Tensor a = promote_for_scalar(a_in, b);
  Tensor out = scalar_values(a, b, BinaryOp::Add, "add");
  if (needs_grad({a})) record("add_scalar", {a}, out, [](const Tensor& dy) { return std::vector<Tensor>{dy}; });
  if (trace.recording()) trace.record({a_in}, out, {{"scalar", b}});
  return out;
}

Tensor sub(const Tensor& a, double b) { return add(a, -b); }

Tensor mul(const Tensor& a_in, double b) {
  trace::OpScope trace("mul_scalar");
  // A mask times a number is float32, as in PyTorch (its default dtype).
  const Tensor a =
      a_in.defined() && a_in.dtype() == DType::Bool ? a_in.to(DType::Float32) : promote_for_scalar(a_in, b);
  Tensor out = scalar_values(a, b, BinaryOp::Mul, "mul");
  if (needs_grad({a})) record("mul_scalar", {a}, out, [b](const Tensor& dy) { return std::vector<Tensor>{mul(dy, b)}; });
  if (trace.recording()) trace.record({a_in}, out, {{"scalar", b}});
  return out;
}

// A true division, not mul(a, 1 / b): the rounded reciprocal is off by an ulp (3 * 0.1 != 0.3).
Tensor div(const Tensor& a_in, double b) {
  trace::OpScope trace("div_scalar");
  const Tensor a = promote_for_scalar(a_in, b, /*true_division=*/true);  // uint8 pixels / 255 are float32
  Tensor out = scalar_values(a, b, BinaryOp::Div, "div");
  if (needs_grad({a})) record("div_scalar", {a}, out, [b](const Tensor& dy) { return std::vector<Tensor>{div(dy, b)}; });
  if (trace.recording()) trace.record({a_in}, out, {{"scalar", b}});
  return out;
}

Tensor rsub(const Tensor& a_in, double b) {
  trace::OpScope trace("rsub");
  const Tensor a = promote_for_scalar(a_in, b);
  Tensor out = scalar_values(a, b, BinaryOp::Sub, "rsub", /*scalar_first=*/true);
  if (needs_grad({a})) record("rsub", {a}, out, [](const Tensor& dy) { return std::vector<Tensor>{neg(dy)}; });
  if (trace.recording()) trace.record({a_in}, out, {{"scalar", b}});
  return out;
}

Tensor rdiv(const Tensor& a_in, double b) {
  trace::OpScope trace("rdiv");
  const Tensor a = promote_for_scalar(a_in, b, /*true_division=*/true);
  Tensor out = scalar_values(a, b, BinaryOp::Div, "rdiv", /*scalar_first=*/true);
  if (needs_grad({a})) {
    record("rdiv", {a}, out, [a, y = out.detach()](const Tensor& dy) {
      return std::vector<Tensor>{neg(div(mul(dy, y), a))};
    }, {a, out});
  }
  if (trace.recording()) trace.record({a_in}, out, {{"scalar", b}});
  return out;
}

Tensor pow(const Tensor& x, double exponent) {
  trace::OpScope trace("pow_scalar");
  Tensor out = scalar_values(x, exponent, BinaryOp::Pow, "pow");
  if (needs_grad({x})) {
    record("pow_scalar", {x}, out, [x, exponent](const Tensor& dy) {
      // x^0 is constant; the formula below would give 0 * 0^-1 = NaN at x = 0.
      if (exponent == 0.0) return std::vector<Tensor>{zeros_like(dy)};
      return std::vector<Tensor>{mul(dy, mul(pow(x, exponent - 1.0), exponent))};
    }, {x});
  }
  if (trace.recording()) trace.record({x}, out, {{"scalar", exponent}});
  return out;
}

// --- unary ----------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  trace::OpScope trace("neg");
  Tensor out = unary_values(x, UnaryOp::Neg, "neg");
  if (needs_grad({x})) record("neg", {x}, out, [](const Tensor& dy) { return std::vector<Tensor>{neg(dy)}; });
  if (trace.recording()) trace.record({x}, out);
  return out;
}

Tensor exp(const Tensor& x) {
  trace::OpScope trace("exp");
  Tensor out = unary_values(x, UnaryOp::Exp, "exp");
  if (needs_grad({x})) {
    record("exp", {x}, out, [y = out.detach()](const Tensor& dy) { return std::vector<Tensor>{mul(dy, y)}; }, {out});
  }
  if (trace.recording()) trace.record({x}, out);
  return out;
}

Tensor log(const Tensor& x) {
  trace::OpScope trace("log");
  Tensor out = unary_values(x, UnaryOp::Log, "log");
  if (needs_grad({x})) record("log", {x}, out, [x](const Tensor& dy) { return std::vector<Tensor>{div(dy, x)}; }, {x});
  if (trace.recording()) trace.record({x}, out);
  return out;
}

Tensor sqrt(const Tensor& x) {
  trace::OpScope trace("sqrt");
  Tensor out = unary_values(x, UnaryOp::Sqrt, "sqrt");
  if (needs_grad({x})) {
    record("sqrt", {x}, out, [y = out.detach()](const Tensor& dy) {
      return std::vector<Tensor>{div(dy, mul(y, 2.0))};
    }, {out});
  }
  if (trace.recording()) trace.record({x}, out);
  return out;
}

Tensor abs(const Tensor& x) {
  trace::OpScope trace("abs");
  Tensor out = unary_values(x, UnaryOp::Abs, "abs");
  if (needs_grad({x})) {
    record("abs", {x}, out, [x](const Tensor& dy) {
      Tensor dx = empty_like(dy);
      LOOM_KERNEL(dx, binary, dx.strided(), dy.strided(), x.detach().strided(),
                  BinaryOp::AbsBackward);
      return std::vector<Tensor>{dx};
    }, {x});
  }
  if (trace.recording()) trace.record({x}, out);
  return out;
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  trace::OpScope trace("clamp");
  check_float_tensor(x, "clamp");
  LOOM_CHECK(min || max, ValueError, "[clamp] needs at least one of min and max");
  double lo = min.value_or(-std::numeric_limits<double>::infinity());
  double hi = max.value_or(std::numeric_limits<double>::infinity());
  LOOM_CHECK(lo <= hi, ValueError, "[clamp] min {} is greater than max {}", lo, hi);
  Tensor out = empty_like(x);
  LOOM_KERNEL(out, clamp, out.strided(), x.strided(), lo, hi);
  if (needs_grad({x})) {
    record("clamp", {x}, out, [x, lo, hi](const Tensor& dy) {
      Tensor dx = empty_like(x);
      LOOM_KERNEL(dx, clamp_backward, dx.strided(), dy.strided(), x.strided(), lo, hi);
      return std::vector<Tensor>{dx};
    }, {x});
  }
  if (trace.recording()) trace.record({x}, out, {{"min", lo}, {"max", hi}});
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

Tensor& operator+=(Tensor& self, const Tensor& other) { return add_(self, other); }
Tensor& operator-=(Tensor& self, const Tensor& other) { return sub_(self, other); }
Tensor& operator*=(Tensor& self, const Tensor& other) { return mul_(self, other); }
Tensor& operator/=(Tensor& self, const Tensor& other) { return div_(self, other); }
Tensor& operator+=(Tensor& self, double value) { return add_(self, value); }
Tensor& operator-=(Tensor& self, double value) { return add_(self, -value); }
Tensor& operator*=(Tensor& self, double value) { return mul_(self, value); }
// A 0-d divisor rather than mul_ by 1 / value: x / 3 and x * (1 / 3) round differently.
Tensor& operator/=(Tensor& self, double value) { return div_(self, full({}, value, self.options())); }

// --- in place ----------------------------------------------------------------------------

namespace {

// `other` expanded to self's shape; a 16-bit self or other meeting a wider one
// is cast to self's dtype, as PyTorch's in-place ops do (fp32 += bf16).
Tensor broadcast_into(const Tensor& self, const Tensor& other_in, std::string_view op) {
  check_float_tensor(self, op);
  check_float_tensor(other_in, op);
  const bool mixed = is_half_precision(self.dtype()) || is_half_precision(other_in.dtype());
  Tensor other = mixed ? other_in.detach().to(self.dtype()) : other_in;
  check_same_dtype_device(self, other, op);
  LOOM_CHECK(broadcast_shapes(self.sizes(), other.sizes(), op) == self.sizes(), ShapeError,
             "[{}] the operand of shape {} does not broadcast to the destination's shape {}", op,
             shape_str(other.sizes()), shape_str(self.sizes()));
  check_inplace(self, op);
  return other.detach().expand(self.sizes());
}

}  // namespace

Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  trace::OpScope trace("add_");  // in place: recorded so that the exporter can refuse it
  if (trace.recording()) trace.record({self, other}, std::vector<Tensor>{});
  Tensor b = broadcast_into(self, other, "add_");
  LOOM_KERNEL(self, add_scaled, self.strided(), self.strided(), b.strided(), alpha);
  return self;
}

Tensor& sub_(Tensor& self, const Tensor& other, double alpha) { return add_(self, other, -alpha); }

Tensor& mul_(Tensor& self, const Tensor& other) {
  trace::OpScope trace("mul_");  // in place: recorded so that the exporter can refuse it
  if (trace.recording()) trace.record({self, other}, std::vector<Tensor>{});
  Tensor b = broadcast_into(self, other, "mul_");
  LOOM_KERNEL(self, binary, self.strided(), self.strided(), b.strided(), BinaryOp::Mul);
  return self;
}

Tensor& div_(Tensor& self, const Tensor& other) {
  trace::OpScope trace("div_");  // in place: recorded so that the exporter can refuse it
  if (trace.recording()) trace.record({self, other}, std::vector<Tensor>{});
  Tensor b = broadcast_into(self, other, "div_");
  LOOM_KERNEL(self, binary, self.strided(), self.strided(), b.strided(), BinaryOp::Div);
  return self;
}

Tensor& add_(Tensor& self, double value) {
  trace::OpScope trace("add_");  // in place: recorded so that the exporter can refuse it
  if (trace.recording()) trace.record({self}, std::vector<Tensor>{});
  check_float_tensor(self, "add_");
  check_inplace(self, "add_");
  LOOM_KERNEL(self, binary_scalar, self.strided(), self.strided(), value, BinaryOp::Add);
  return self;
}

Tensor& increment_(Tensor& counter, int64_t by, CounterOrder order) {
  LOOM_CHECK(counter.defined() && counter.dtype() == DType::Int64 && counter.numel() == 1, TypeError,
             "[increment_] the counter must be one int64 value, got {}",
             counter.defined() ? fmt::format("{} of shape {}", dtype_name(counter.dtype()),
                                             shape_str(counter.sizes()))
                               : std::string("an undefined tensor"));
  check_inplace(counter, "increment_");
  if (counter.device().is_cuda()) {
    DeviceGuard guard(counter.device());
    auto* value = static_cast<int64_t*>(counter.raw_data());
    if (order == CounterOrder::AtCaptureEnd && cuda::increment_at_capture_end(value, by)) return counter;
    cuda::increment(value, by);
    return counter;
  }
  *static_cast<int64_t*>(counter.raw_data()) += by;
  return counter;
}

Tensor& mul_(Tensor& self, double value) {
  trace::OpScope trace("mul_");  // in place: recorded so that the exporter can refuse it
  if (trace.recording()) trace.record({self}, std::vector<Tensor>{});
  check_float_tensor(self, "mul_");
  check_inplace(self, "mul_");
  LOOM_KERNEL(self, binary_scalar, self.strided(), self.strided(), value, BinaryOp::Mul);
  return self;
}

}  // namespace loom
