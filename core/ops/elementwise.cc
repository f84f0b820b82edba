// File: core/ops/elementwise.cc
// Elementwise arithmetic, unary math and in-place updates: validation, dtype
// promotion, dispatch, and each op's backward beside its forward.
#include "core/ops/elementwise.h"

#include <cmath>
#include <limits>
#include <numbers>

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

// int32, int64, uint8: the dtypes visit_arithmetic computes integers in.
bool is_integer_dtype(DType dtype) { return !is_floating(dtype) && dtype != DType::Bool; }

// A number that an integer tensor takes as an integer: whole and within int64
// (the double API cannot tell 2 from 2.0, so both are whole here).
bool whole_number(double s) { return std::trunc(s) == s && std::fabs(s) < 0x1p63; }

// The operand of arithmetic that may have an integer result (add, sub, mul, neg,
// abs, pow by a number): floating as check_float_tensor has it, or int32, int64, uint8.
void check_arithmetic_tensor(const Tensor& x, std::string_view op, std::string_view arg = "input") {
  if (x.defined() && is_integer_dtype(x.dtype())) return;
  LOOM_CHECK(!x.defined() || x.dtype() != DType::Bool, TypeError,
             "[{}] {} is a Bool mask of shape {}; masks combine with logical_and / _or / _xor / _not "
             "(&, |, ^, ~); for arithmetic convert it with .to(DType::Int64) or .to(DType::Float32)",
             op, arg, shape_str(x.sizes()));
  check_float_tensor(x, op, arg);
}

// Two integer or Bool operands meet in the wider integer dtype (uint8 with int64
// -> int64, a mask with int32 -> int32), or both in float32, PyTorch's default
// dtype, for a true division; one meeting a floating operand takes its dtype
// (uint8 pixels times a float32 scale).
std::pair<Tensor, Tensor> promote_integers(const Tensor& a, const Tensor& b, bool true_division) {
  if (!a.defined() || !b.defined()) return {a, b};  // check_float_tensor names the undefined one
  if (is_integral(a) && is_integral(b)) {
    const DType common = true_division ? DType::Float32 : promote_types(a.dtype(), b.dtype());
    return {a.to(common), b.to(common)};
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
  check_arithmetic_tensor(a, name);
  check_arithmetic_tensor(b, name);
  return promote_operands(a, b);
}

// An integer or Bool tensor meeting numbers, as PyTorch's: float32 unless they are
// all whole (labels * 0.5); with whole ones the integer tensor's own dtype (labels + 1),
// int64 for a mask (mask * 2).
Tensor promote_for_numbers(const Tensor& a, bool all_whole) {
  if (!is_integral(a)) return a;
  if (!all_whole) return a.to(DType::Float32);
  return a.dtype() == DType::Bool ? a.to(DType::Int64) : a;
}

// One number, or a true division (float32 for integers: uint8 pixels / 255).
Tensor promote_for_scalar(const Tensor& a, double s, bool true_division = false) {
  return promote_for_numbers(a, !true_division && whole_number(s));
}

// exp, log, sqrt of an integer or Bool tensor compute in float32, as PyTorch's.
Tensor floating_operand(const Tensor& x) { return is_integral(x) ? x.to(DType::Float32) : x; }

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
  check_arithmetic_tensor(x, name);
  Tensor out = empty_like(x);
  LOOM_KERNEL(out, unary, out.strided(), x.strided(), op);
  return out;
}

Tensor scalar_values(const Tensor& a, double s, BinaryOp op, std::string_view name,
                     bool scalar_first = false) {
  check_arithmetic_tensor(a, name);
  Tensor out = empty_like(a);
  LOOM_KERNEL(out, binary_scalar, out.strided(), a.strided(), s, op, scalar_first);
  return out;
}

// An integer divisor with a zero: PyTorch's CPU raises ZeroDivisionError. On the GPU
// the kernel gives 0 there instead (kernel::math::integer_floor_divide): a check would
// wait for the GPU.
void check_divisor(const Tensor& b, std::string_view name) {
  if (!b.defined() || !is_integer_dtype(b.dtype()) || !b.device().is_cpu()) return;
  LOOM_CHECK(!cpu::has_zero(b.strided()), ValueError,
             "[{}] integer division by zero: the {} divisor of shape {} holds a zero (PyTorch raises "
             "ZeroDivisionError); convert the operands with .to(DType::Float32) for IEEE results (inf, NaN)",
             name, dtype_name(b.dtype()), shape_str(b.sizes()));
}

// A number divides an integer tensor in its dtype, wrapped to its width (uint8 % 256
// divides by 0), on any device.
void check_scalar_divisor(const Tensor& a, double b, std::string_view name) {
  if (!a.defined() || !is_integer_dtype(a.dtype())) return;
  const int bits = static_cast<int>(element_size(a.dtype())) * 8;
  const auto value = static_cast<uint64_t>(static_cast<int64_t>(b));
  const uint64_t low = bits == 64 ? value : value & ((uint64_t{1} << bits) - 1);
  LOOM_CHECK(low != 0, ValueError,
             "[{}] integer division by zero: the {} tensor divided by {} (in its dtype, 0; PyTorch raises "
             "ZeroDivisionError); convert it with .to(DType::Float32) for IEEE results (inf, NaN)",
             name, dtype_name(a.dtype()), b);
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
  LOOM_CHECK(is_floating(a.dtype()) || whole_number(alpha), TypeError,
             "[{}] takes {} operands with a whole alpha only, as PyTorch does; got alpha {} (convert "
             "an operand with .to(DType::Float32) for a fractional one)",
             name, dtype_name(a.dtype()), alpha);
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

namespace {

bool both_masks(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() == DType::Bool && b.dtype() == DType::Bool;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  trace::OpScope trace("add");
  if (trace.substituting()) {  // fusion by tracing: a residual add may end a fused chain
    if (auto y = trace.substitute({a, b}, {{"alpha", alpha}})) return *y;
  }
  if (both_masks(a, b)) {  // PyTorch's sum of two masks is their logical or
    LOOM_CHECK(alpha == 1.0, TypeError, "[add] of two Bool masks takes no alpha (got {}); it is their logical or",
               alpha);
    Tensor out = logical_or(a, b);
    if (trace.recording()) trace.record({a, b}, out, {{"alpha", alpha}});
    return out;
  }
  Tensor out = add_scaled_op(a, b, alpha, "add");
  if (trace.recording()) trace.record({a, b}, out, {{"alpha", alpha}});
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  trace::OpScope trace("sub");
  LOOM_CHECK(!both_masks(a, b), TypeError,
             "[sub] of two Bool masks is not defined (as in PyTorch); use logical_xor (^) or logical_and(a, ~b)");
  Tensor out = add_scaled_op(a, b, -alpha, "sub");
  if (trace.recording()) trace.record({a, b}, out, {{"alpha", alpha}});
  return out;
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  trace::OpScope trace("mul");
  if (both_masks(a_in, b_in)) {
    Tensor out = logical_and(a_in, b_in);
    if (trace.recording()) trace.record({a_in, b_in}, out);
    return out;
  }
  // Two masks give their logical and; a mask meets anything else in its dtype (0 or 1
  // per element, no gradient to the mask), as promote_binary has it.
  const auto operands = promote_binary(a_in, b_in, "mul");
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
  LOOM_CHECK(is_floating(x.dtype()), TypeError,
             "[pow] of two {} tensors has no kernel in Loom (an integer power needs its exponents checked "
             "for negatives); convert the base with .to(DType::Float32), or raise it to a number: pow(x, 2)",
             dtype_name(x.dtype()));
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

// Not recorded for autograd: PyTorch marks floor_divide not differentiable, so its
// output does not require grad.
Tensor floor_divide(const Tensor& a_in, const Tensor& b_in) {
  trace::OpScope trace("floor_divide");
  const auto [a, b] = promote_binary(a_in, b_in, "floor_divide");
  check_divisor(b, "floor_divide");
  Tensor out = binary_values(a, b, BinaryOp::FloorDivide, "floor_divide");
  if (trace.recording()) trace.record({a_in, b_in}, out);
  return out;
}

// Gradients as PyTorch's derivatives.yaml: da = dy, db = -floor_divide(a, b) * dy.
Tensor remainder(const Tensor& a_in, const Tensor& b_in) {
  trace::OpScope trace("remainder");
  const auto operands = promote_binary(a_in, b_in, "remainder");
  const Tensor &a = operands.first, &b = operands.second;
  check_divisor(b, "remainder");
  Tensor out = binary_values(a, b, BinaryOp::Remainder, "remainder");
  if (needs_grad({a, b})) {
    record("remainder", {a, b}, out, [a, b](const Tensor& dy) {
      Tensor da = a.requires_grad() ? reduce_grad(dy, a) : Tensor();
      Tensor db = b.requires_grad() ? reduce_grad(neg(mul(dy, floor_divide(a, b))), b) : Tensor();
      return std::vector<Tensor>{da, db};
    }, {a, b});
  }
  if (trace.recording()) trace.record({a_in, b_in}, out);
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
  const Tensor a = promote_for_scalar(a_in, b);
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

namespace {

// floor_divide or remainder (`op`) of x and a number: x // s and x % s, or s // x and
// s % x when scalar_first (the trace's rfloor_divide and rremainder, as rsub and rdiv),
// where x is the divisor. The gradients are remainder's (floor_divide has none): dy to
// a dividend x, -floor_divide(s, x) * dy to a divisor x.
Tensor python_division(const Tensor& x_in, double s, BinaryOp op, bool scalar_first) {
  const bool is_remainder = op == BinaryOp::Remainder;
  const char* name = is_remainder ? "remainder" : "floor_divide";
  const char* traced = scalar_first ? (is_remainder ? "rremainder" : "rfloor_divide")
                                    : (is_remainder ? "remainder_scalar" : "floor_divide_scalar");
  trace::OpScope trace(traced);
  const Tensor x = promote_for_scalar(x_in, s);
  if (scalar_first) check_divisor(x, name);
  else check_scalar_divisor(x, s, name);
  Tensor out = scalar_values(x, s, op, name, scalar_first);
  if (is_remainder && needs_grad({x})) {
    if (scalar_first) {
      record(traced, {x}, out, [x, s](const Tensor& dy) {
        return std::vector<Tensor>{neg(mul(dy, floor_divide(s, x)))};
      }, {x});
    } else {
      record(traced, {x}, out, [](const Tensor& dy) { return std::vector<Tensor>{dy}; });
    }
  }
  if (trace.recording()) trace.record({x_in}, out, {{"scalar", s}});
  return out;
}

}  // namespace

Tensor floor_divide(const Tensor& a, double b) { return python_division(a, b, BinaryOp::FloorDivide, false); }
Tensor remainder(const Tensor& a, double b) { return python_division(a, b, BinaryOp::Remainder, false); }
Tensor floor_divide(double a, const Tensor& b) { return python_division(b, a, BinaryOp::FloorDivide, true); }
Tensor remainder(double a, const Tensor& b) { return python_division(b, a, BinaryOp::Remainder, true); }

Tensor pow(const Tensor& x_in, double exponent) {
  trace::OpScope trace("pow_scalar");
  const Tensor x = promote_for_scalar(x_in, exponent);
  LOOM_CHECK(!x.defined() || is_floating(x.dtype()) || exponent >= 0, ValueError,
             "[pow] integers to negative integer powers are not allowed (as in PyTorch): a {} tensor to the "
             "power {}; convert it with .to(DType::Float32)",
             dtype_name(x.dtype()), exponent);
  Tensor out = scalar_values(x, exponent, BinaryOp::Pow, "pow");
  if (needs_grad({x})) {
    record("pow_scalar", {x}, out, [x, exponent](const Tensor& dy) {
      // x^0 is constant; the formula below would give 0 * 0^-1 = NaN at x = 0.
      if (exponent == 0.0) return std::vector<Tensor>{zeros_like(dy)};
      return std::vector<Tensor>{mul(dy, mul(pow(x, exponent - 1.0), exponent))};
    }, {x});
  }
  if (trace.recording()) trace.record({x_in}, out, {{"scalar", exponent}});
  return out;
}

// --- unary ----------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  trace::OpScope trace("neg");
  LOOM_CHECK(!x.defined() || x.dtype() != DType::Bool, TypeError,
             "[neg] of a Bool mask is not defined (as in PyTorch); invert a mask with ~ or logical_not");
  Tensor out = unary_values(x, UnaryOp::Neg, "neg");
  if (needs_grad({x})) record("neg", {x}, out, [](const Tensor& dy) { return std::vector<Tensor>{neg(dy)}; });
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

namespace {

// A floating unary row: y = f(x), an integer x taken in float32. Its gradient
// reads x or y (whichever the row saves) and dy.
struct FloatingRow {
  UnaryOp op;
  const char* name;
  bool saves_output;
  Tensor (*gradient)(const Tensor& dy, const Tensor& saved);
};

constexpr double kLn2 = std::numbers::ln2, kLn10 = std::numbers::ln10;

constexpr FloatingRow kExp{UnaryOp::Exp, "exp", true, [](const Tensor& dy, const Tensor& y) { return mul(dy, y); }};
constexpr FloatingRow kLog{UnaryOp::Log, "log", false, [](const Tensor& dy, const Tensor& x) { return div(dy, x); }};
constexpr FloatingRow kSqrt{UnaryOp::Sqrt, "sqrt", true,
                            [](const Tensor& dy, const Tensor& y) { return div(dy, mul(y, 2.0)); }};
constexpr FloatingRow kSin{UnaryOp::Sin, "sin", false,
                           [](const Tensor& dy, const Tensor& x) { return mul(dy, cos(x)); }};
constexpr FloatingRow kCos{UnaryOp::Cos, "cos", false,
                           [](const Tensor& dy, const Tensor& x) { return neg(mul(dy, sin(x))); }};
constexpr FloatingRow kLog1p{UnaryOp::Log1p, "log1p", false,
                             [](const Tensor& dy, const Tensor& x) { return div(dy, add(x, 1.0)); }};
constexpr FloatingRow kExpm1{UnaryOp::Expm1, "expm1", true,
                             [](const Tensor& dy, const Tensor& y) { return mul(dy, add(y, 1.0)); }};
constexpr FloatingRow kLog2{UnaryOp::Log2, "log2", false,
                            [](const Tensor& dy, const Tensor& x) { return div(dy, mul(x, kLn2)); }};
constexpr FloatingRow kLog10{UnaryOp::Log10, "log10", false,
                             [](const Tensor& dy, const Tensor& x) { return div(dy, mul(x, kLn10)); }};
constexpr FloatingRow kTan{UnaryOp::Tan, "tan", true,
                           [](const Tensor& dy, const Tensor& y) { return mul(dy, add(mul(y, y), 1.0)); }};
constexpr FloatingRow kAtan{UnaryOp::Atan, "atan", false,
                            [](const Tensor& dy, const Tensor& x) { return div(dy, add(mul(x, x), 1.0)); }};
constexpr FloatingRow kErf{UnaryOp::Erf, "erf", false, [](const Tensor& dy, const Tensor& x) {
                             return mul(dy, mul(exp(neg(mul(x, x))), 2.0 * std::numbers::inv_sqrtpi));
                           }};
constexpr FloatingRow kRsqrt{UnaryOp::Rsqrt, "rsqrt", true, [](const Tensor& dy, const Tensor& y) {
                               return mul(dy, mul(mul(y, mul(y, y)), -0.5));
                             }};

Tensor floating_unary(const Tensor& x_in, const FloatingRow& row) {
  trace::OpScope trace(row.name);
  const Tensor x = floating_operand(x_in);
  Tensor out = unary_values(x, row.op, row.name);
  if (needs_grad({x})) {
    const Tensor saved = row.saves_output ? out : x;
    record(row.name, {x}, out, [saved = saved.detach(), gradient = row.gradient](const Tensor& dy) {
      return std::vector<Tensor>{gradient(dy, saved)};
    }, {saved});
  }
  if (trace.recording()) trace.record({x_in}, out);  // the caller's tensor: the exporter casts an integer one
  return out;
}

}  // namespace

Tensor exp(const Tensor& x) { return floating_unary(x, kExp); }
Tensor log(const Tensor& x) { return floating_unary(x, kLog); }
Tensor sqrt(const Tensor& x) { return floating_unary(x, kSqrt); }
Tensor sin(const Tensor& x) { return floating_unary(x, kSin); }
Tensor cos(const Tensor& x) { return floating_unary(x, kCos); }
Tensor log1p(const Tensor& x) { return floating_unary(x, kLog1p); }
Tensor expm1(const Tensor& x) { return floating_unary(x, kExpm1); }
Tensor log2(const Tensor& x) { return floating_unary(x, kLog2); }
Tensor log10(const Tensor& x) { return floating_unary(x, kLog10); }
Tensor tan(const Tensor& x) { return floating_unary(x, kTan); }
Tensor atan(const Tensor& x) { return floating_unary(x, kAtan); }
Tensor erf(const Tensor& x) { return floating_unary(x, kErf); }
Tensor rsqrt(const Tensor& x) { return floating_unary(x, kRsqrt); }

namespace {

// floor, ceil, round, trunc and sign: piecewise constant, so their gradient is
// zero, as PyTorch's (not none: the output requires grad where x does).
void record_zero_gradient(const char* name, const Tensor& x, Tensor& out) {
  if (needs_grad({x})) record(name, {x}, out, [](const Tensor& dy) { return std::vector<Tensor>{zeros_like(dy)}; });
}

Tensor rounding(const Tensor& x, UnaryOp op, const char* name) {
  trace::OpScope trace(name);
  Tensor out = unary_values(x, op, name);
  record_zero_gradient(name, x, out);
  if (trace.recording()) trace.record({x}, out);
  return out;
}

}  // namespace

Tensor floor(const Tensor& x) { return rounding(x, UnaryOp::Floor, "floor"); }
Tensor ceil(const Tensor& x) { return rounding(x, UnaryOp::Ceil, "ceil"); }
Tensor round(const Tensor& x) { return rounding(x, UnaryOp::Round, "round"); }
Tensor trunc(const Tensor& x) { return rounding(x, UnaryOp::Trunc, "trunc"); }
Tensor sign(const Tensor& x) { return rounding(x, UnaryOp::Sign, "sign"); }

// PyTorch's round_decimals_kernel: nearbyint(x * p) / p, or nearbyint(x / p) * p for
// negative decimals, with p = 10^|decimals| in the computing dtype (float32 for 16-bit
// x, as its opmath type), each step rounding there. Three kernels on x's device, in place.
Tensor round(const Tensor& x, int64_t decimals) {
  trace::OpScope trace("round");
  LOOM_CHECK(!x.defined() || is_floating(x.dtype()), TypeError,
             "[round] with decimals ({}) takes a floating tensor, but the input is {} of shape {} (PyTorch has no "
             "integer kernel for it); an integer tensor is already whole (round(x) copies it), or convert it "
             "with .to(DType::Float32)",
             decimals, dtype_name(x.dtype()), shape_str(x.sizes()));
  check_float_tensor(x, "round");
  Tensor out;
  if (decimals == 0) {
    out = unary_values(x, UnaryOp::Round, "round");
  } else {
    const double scale = std::pow(10.0, std::fabs(static_cast<double>(decimals)));
    const BinaryOp first = decimals > 0 ? BinaryOp::Mul : BinaryOp::Div;
    const BinaryOp second = decimals > 0 ? BinaryOp::Div : BinaryOp::Mul;
    out = scalar_values(is_half_precision(x.dtype()) ? x.detach().to(DType::Float32) : x.detach(), scale, first,
                        "round");
    LOOM_KERNEL(out, unary, out.strided(), out.strided(), UnaryOp::Round);
    LOOM_KERNEL(out, binary_scalar, out.strided(), out.strided(), scale, second);
    if (out.dtype() != x.dtype()) out = out.to(x.dtype());
  }
  record_zero_gradient("round", x, out);
  if (trace.recording()) trace.record({x}, out, {{"decimals", decimals}});
  return out;
}

namespace {

// The values an integer dtype holds, as doubles (int64's as [-2^63, 2^63]: every whole
// number of magnitude below 2^63 fits).
std::pair<double, double> integer_range(DType dtype) {
  if (dtype == DType::UInt8) return {0.0, 255.0};
  if (dtype == DType::Int32) return {-0x1p31, 0x1p31 - 1.0};
  return {-0x1p63, 0x1p63};
}

// clamp of an integer x by whole bounds, in its dtype, as PyTorch's prepare_clamp_bound:
// a bound beyond the range on its own side changes nothing and is dropped (lo, hi become
// infinite); one beyond the other side would set every element to a value the dtype
// cannot hold, and is refused. maximum and minimum with a 0-d bound are comparison and
// where kernels, so both devices have it without a kernel of its own.
Tensor clamp_integer(const Tensor& x, double& lo, double& hi) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const auto [lowest, highest] = integer_range(x.dtype());
  LOOM_CHECK(lo <= highest && hi >= lowest, ValueError,
             "[clamp] the {} bound {} is outside the range of the {} input ([{}, {}]), so every element would "
             "become a value it cannot hold (PyTorch refuses it too); convert x with .to(DType::Int64) or "
             ".to(DType::Float32) first",
             lo > highest ? "min" : "max", lo > highest ? lo : hi, dtype_name(x.dtype()), lowest, highest);
  if (lo < lowest) lo = -kInf;
  if (hi > highest) hi = kInf;
  Tensor out = x;
  if (lo != -kInf) out = maximum(out, full({}, lo, x.options()));
  if (hi != kInf) out = minimum(out, full({}, hi, x.options()));
  return out.is_same(x) ? x.clone() : out;
}

}  // namespace

Tensor clamp(const Tensor& x_in, std::optional<double> min, std::optional<double> max) {
  trace::OpScope trace("clamp");
  LOOM_CHECK(min || max, ValueError, "[clamp] needs at least one of min and max");
  double lo = min.value_or(-std::numeric_limits<double>::infinity());
  double hi = max.value_or(std::numeric_limits<double>::infinity());
  const Tensor x = promote_for_numbers(x_in, (!min || whole_number(lo)) && (!max || whole_number(hi)));
  if (x.defined() && is_integer_dtype(x.dtype())) {
    Tensor out = clamp_integer(x, lo, hi);
    if (trace.recording()) trace.record({x_in}, out, {{"min", lo}, {"max", hi}});
    return out;
  }
  check_float_tensor(x, "clamp");
  Tensor out = empty_like(x);
  if (std::isnan(lo) || std::isnan(hi)) {  // as PyTorch's vectorized clamp: NaN everywhere (gradient 0)
    out.fill_(std::numeric_limits<double>::quiet_NaN());
  } else {
    LOOM_KERNEL(out, clamp, out.strided(), x.strided(), lo, hi);
  }
  if (needs_grad({x})) {
    record("clamp", {x}, out, [x, lo, hi](const Tensor& dy) {
      Tensor dx = empty_like(x);
      LOOM_KERNEL(dx, clamp_backward, dx.strided(), dy.strided(), x.strided(), lo, hi);
      return std::vector<Tensor>{dx};
    }, {x});
  }
  if (trace.recording()) trace.record({x_in}, out, {{"min", lo}, {"max", hi}});
  return out;
}

// --- operators --------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator%(const Tensor& a, const Tensor& b) { return remainder(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator%(const Tensor& a, double b) { return remainder(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return rdiv(b, a); }
Tensor operator%(double a, const Tensor& b) { return remainder(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }

Tensor& operator+=(Tensor& self, const Tensor& other) { return add_(self, other); }
Tensor& operator-=(Tensor& self, const Tensor& other) { return sub_(self, other); }
Tensor& operator*=(Tensor& self, const Tensor& other) { return mul_(self, other); }
Tensor& operator/=(Tensor& self, const Tensor& other) { return div_(self, other); }
Tensor& operator%=(Tensor& self, const Tensor& other) { return remainder_(self, other); }
Tensor& operator+=(Tensor& self, double value) { return add_(self, value); }
Tensor& operator-=(Tensor& self, double value) { return add_(self, -value); }
Tensor& operator*=(Tensor& self, double value) { return mul_(self, value); }
// A 0-d divisor rather than mul_ by 1 / value: x / 3 and x * (1 / 3) round differently.
Tensor& operator/=(Tensor& self, double value) { return div_(self, full({}, value, self.options())); }
Tensor& operator%=(Tensor& self, double value) { return remainder_(self, value); }

// --- in place ----------------------------------------------------------------------------

namespace {

// `other` expanded to self's shape, in self's dtype where PyTorch's in-place ops
// cast it: a 16-bit self or other meeting a wider one (fp32 += bf16), an integer
// or Bool other into a floating or integer self (int64 += int32, int32 += int64).
// A floating other into an integer self is refused, as the result's dtype would be.
Tensor broadcast_into(const Tensor& self, const Tensor& other_in, std::string_view op) {
  check_arithmetic_tensor(self, op);
  LOOM_CHECK(!other_in.defined() || is_floating(self.dtype()) || !is_floating(other_in.dtype()), TypeError,
             "[{}] the result of {} and {} is floating, which cannot be written into the {} tensor in "
             "place (as in PyTorch); write x = x.to(DType::Float32) first, or use the out-of-place op",
             op, dtype_name(self.dtype()), dtype_name(other_in.dtype()), dtype_name(self.dtype()));
  Tensor other = is_integral(other_in) ? other_in.detach().to(self.dtype()) : other_in;
  check_arithmetic_tensor(other, op);
  const bool mixed = is_half_precision(self.dtype()) || is_half_precision(other.dtype());
  if (mixed) other = other.detach().to(self.dtype());
  check_same_dtype_device(self, other, op);
  LOOM_CHECK(broadcast_shapes(self.sizes(), other.sizes(), op) == self.sizes(), ShapeError,
             "[{}] the operand of shape {} does not broadcast to the destination's shape {}", op,
             shape_str(other.sizes()), shape_str(self.sizes()));
  check_inplace(self, op);
  return other.detach().expand(self.sizes());
}

// self op= value: an integer self takes whole numbers only (its result stays an integer).
// `relation` words the op in the message ("times or plus", "modulo").
void check_inplace_scalar(const Tensor& self, double value, std::string_view op,
                          std::string_view relation = "times or plus") {
  check_arithmetic_tensor(self, op);
  LOOM_CHECK(is_floating(self.dtype()) || whole_number(value), TypeError,
             "[{}] the {} tensor {} {} is floating, which cannot be written into it in place (as in "
             "PyTorch); write x = x.to(DType::Float32) first, or use the out-of-place op",
             op, dtype_name(self.dtype()), relation, value);
  check_inplace(self, op);
}

}  // namespace

Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  trace::OpScope trace("add_");  // in place: recorded so that the exporter can refuse it
  if (trace.recording()) trace.record({self, other}, std::vector<Tensor>{});
  Tensor b = broadcast_into(self, other, "add_");
  LOOM_CHECK(is_floating(self.dtype()) || whole_number(alpha), TypeError,
             "[add_] takes a {} tensor with a whole alpha only, as PyTorch does; got alpha {}",
             dtype_name(self.dtype()), alpha);
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
  LOOM_CHECK(!is_integral(self), TypeError,
             "[div_] a true division of the {} tensor is floating, which cannot be written into it in place (as "
             "in PyTorch); write x = x / y, or convert x with .to(DType::Float32) first",
             dtype_name(self.dtype()));
  Tensor b = broadcast_into(self, other, "div_");
  LOOM_KERNEL(self, binary, self.strided(), self.strided(), b.strided(), BinaryOp::Div);
  return self;
}

// Its checks come before the kernel, so a refused divisor writes nothing.
namespace {

// self // other or self % other in place (Python's signs); an integer divisor holding
// a zero is refused as the out-of-place ops refuse it.
Tensor& python_division_(Tensor& self, const Tensor& other, BinaryOp op, const char* name) {
  trace::OpScope trace(name);  // in place: recorded so that the exporter can refuse it
  if (trace.recording()) trace.record({self, other}, std::vector<Tensor>{});
  Tensor b = broadcast_into(self, other, name);
  check_divisor(b, name);
  LOOM_KERNEL(self, binary, self.strided(), self.strided(), b.strided(), op);
  return self;
}

Tensor& python_division_(Tensor& self, double value, BinaryOp op, const char* name) {
  trace::OpScope trace(name);  // in place: recorded so that the exporter can refuse it
  if (trace.recording()) trace.record({self}, std::vector<Tensor>{});
  check_inplace_scalar(self, value, name, op == BinaryOp::Remainder ? "modulo" : "floor-divided by");
  check_scalar_divisor(self, value, name);
  LOOM_KERNEL(self, binary_scalar, self.strided(), self.strided(), value, op);
  return self;
}

}  // namespace

Tensor& remainder_(Tensor& self, const Tensor& other) {
  return python_division_(self, other, BinaryOp::Remainder, "remainder_");
}
Tensor& remainder_(Tensor& self, double value) {
  return python_division_(self, value, BinaryOp::Remainder, "remainder_");
}
Tensor& floor_divide_(Tensor& self, const Tensor& other) {
  return python_division_(self, other, BinaryOp::FloorDivide, "floor_divide_");
}
Tensor& floor_divide_(Tensor& self, double value) {
  return python_division_(self, value, BinaryOp::FloorDivide, "floor_divide_");
}

Tensor& add_(Tensor& self, double value) {
  trace::OpScope trace("add_");  // in place: recorded so that the exporter can refuse it
  if (trace.recording()) trace.record({self}, std::vector<Tensor>{});
  check_inplace_scalar(self, value, "add_");
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
  check_inplace_scalar(self, value, "mul_");
  LOOM_KERNEL(self, binary_scalar, self.strided(), self.strided(), value, BinaryOp::Mul);
  return self;
}

}  // namespace loom
