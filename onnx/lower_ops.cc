// File: onnx/lower_ops.cc
// One row per traced Loom op: the ONNX (opset 17) nodes that compute it. A
// row reads the op's inputs by their names, emits nodes and binds the op's
// outputs. PyTorch's conventions hold on both sides (NCHW, weights (K, C/g, R,
// S), pads per side), so most rows are one node.
//
// N batch, C channels, H, W, K out channels, R, S filter.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <string_view>

#include "core/ops/attention.h"
#include "core/ops/compare.h"
#include "core/ops/elementwise.h"
#include "core/ops/shape_ops.h"
#include "onnx/lowering.h"

namespace loom::onnx {

namespace {

using Attrs = std::vector<proto::Attribute>;
using Row = std::function<void(Lowering&, const trace::Op&)>;

std::string in(Lowering& L, const trace::Op& op, size_t i) { return L.name_of(op.inputs.at(i)); }
// The optional input i's name, or "" (ONNX's "left out") when it was not given.
std::string optional_in(Lowering& L, const trace::Op& op, size_t i) {
  return i < op.inputs.size() && op.inputs[i].defined() ? L.name_of(op.inputs[i]) : "";
}
void out(Lowering& L, const trace::Op& op, const std::string& name) { L.bind(op.outputs.at(0), name); }
DType dtype_of(const trace::Op& op) { return op.outputs.at(0).dtype(); }

std::vector<int64_t> pair_pads(const std::vector<int64_t>& padding) {  // [h, w] -> [top, left, bottom, right]
  return {padding[0], padding[1], padding[0], padding[1]};
}

std::string conv(Lowering& L, const trace::Op& op, const std::string& x) {
  const Tensor& w = op.inputs.at(1);
  std::vector<std::string> inputs = {x, in(L, op, 1)};
  if (const std::string b = optional_in(L, op, 2); !b.empty()) inputs.push_back(b);
  return L.emit("Conv", inputs,
                {{"kernel_shape", std::vector<int64_t>{w.size(2), w.size(3)}},
                 {"strides", op.get_ints("stride")},
                 {"pads", pair_pads(op.get_ints("padding"))},
                 {"dilations", op.get_ints("dilation")},
                 {"group", op.get_int("groups")}});
}

void conv_transpose(Lowering& L, const trace::Op& op) {
  const Tensor& w = op.inputs.at(1);
  std::vector<std::string> inputs = {in(L, op, 0), in(L, op, 1)};
  if (const std::string b = optional_in(L, op, 2); !b.empty()) inputs.push_back(b);
  out(L, op,
      L.emit("ConvTranspose", inputs,
             {{"kernel_shape", std::vector<int64_t>{w.size(2), w.size(3)}},
              {"strides", op.get_ints("stride")},
              {"pads", pair_pads(op.get_ints("padding"))},
              {"dilations", op.get_ints("dilation")},
              {"group", op.get_int("groups")},
              {"output_padding", op.get_ints("output_padding")}}));
}

// x (..., in) . w (out, in)^T + b: Gemm for 2-D x, else MatMul and Add.
std::string linear(Lowering& L, const trace::Op& op) {
  const std::string x = in(L, op, 0), w = in(L, op, 1), b = optional_in(L, op, 2);
  if (op.inputs[0].dim() == 2) {
    std::vector<std::string> inputs = {x, w};
    if (!b.empty()) inputs.push_back(b);
    return L.emit("Gemm", inputs, {{"transB", int64_t{1}}});
  }
  std::string y = L.emit("MatMul", {x, L.emit("Transpose", {w}, {{"perm", std::vector<int64_t>{1, 0}}})});
  return b.empty() ? y : L.emit("Add", {y, b});
}

// Input i of op, a (C) weight or bias over x's dim 1, or a constant `value` where it is missing.
std::string channel_or_filled(Lowering& L, const trace::Op& op, size_t i, int64_t c, double value) {
  return op.inputs[i].defined() ? L.name_of(op.inputs[i])
                                : L.tensor_constant(full({c}, value, {.dtype = op.inputs[0].dtype()}), "filled");
}

// Inference batch norm over dim 1; a missing weight or bias is 1 or 0.
std::string batch_norm(Lowering& L, const trace::Op& op) {
  if (op.get_int("training") != 0) {
    L.fail("batch statistics (training mode, or a norm without running statistics) have no inference form; "
           "export in evaluation mode with track_running_stats");
  }
  const Tensor& x = op.inputs[0];
  const int64_t c = x.size(1);
  return L.emit("BatchNormalization",
                {L.name_of(x), channel_or_filled(L, op, 3, c, 1.0), channel_or_filled(L, op, 4, c, 0.0),
                 in(L, op, 1), in(L, op, 2)},
                {{"epsilon", static_cast<float>(op.get_double("eps"))}});
}

// Each (sample, channel) over its spatial values, or (use_input_stats off) the
// running statistics' BatchNormalization; inputs x, running mean, var, weight, bias.
std::string instance_norm(Lowering& L, const trace::Op& op) {
  if (op.get_int("use_input_stats") == 0) {  // the same inputs as batch_norm's trace
    return L.emit("BatchNormalization",
                  {L.name_of(op.inputs[0]), channel_or_filled(L, op, 3, op.inputs[0].size(1), 1.0),
                   channel_or_filled(L, op, 4, op.inputs[0].size(1), 0.0), in(L, op, 1), in(L, op, 2)},
                  {{"epsilon", static_cast<float>(op.get_double("eps"))}});
  }
  const Tensor& x = op.inputs[0];
  const int64_t c = x.size(1);
  return L.emit("InstanceNormalization",
                {L.name_of(x), channel_or_filled(L, op, 3, c, 1.0), channel_or_filled(L, op, 4, c, 0.0)},
                {{"epsilon", static_cast<float>(op.get_double("eps"))}});
}

// Opset 17 has no GroupNormalization: x (N, C, ...) as (N, G, rest), each
// group instance-normalized, back to x's shape, then the per-channel affine.
std::string group_norm(Lowering& L, const trace::Op& op) {
  const Tensor& x = op.inputs[0];
  const int64_t groups = op.get_int("num_groups");
  const std::string grouped = L.emit("Reshape", {L.name_of(x), L.ints({0, groups, -1})});
  const std::string normalized = L.emit(
      "InstanceNormalization",
      {grouped, L.tensor_constant(ones({groups}, {.dtype = x.dtype()}), "ones"),
       L.tensor_constant(zeros({groups}, {.dtype = x.dtype()}), "zeros")},
      {{"epsilon", static_cast<float>(op.get_double("eps"))}});
  std::string y = L.emit("Reshape", {normalized, L.emit("Shape", {L.name_of(x)})});
  std::vector<int64_t> spatial_axes;  // (C) -> (C, 1, ...): broadcast over the spatial dims
  for (int64_t d = 1; d + 1 < x.dim(); ++d) spatial_axes.push_back(d);
  for (const auto& [i, op_type] : {std::pair{size_t{1}, "Mul"}, std::pair{size_t{2}, "Add"}}) {
    if (!op.inputs[i].defined()) continue;
    std::string v = L.name_of(op.inputs[i]);
    if (!spatial_axes.empty()) v = L.emit("Unsqueeze", {v, L.ints(spatial_axes)});
    y = L.emit(op_type, {y, v});
  }
  return y;
}

std::string layer_norm(Lowering& L, const trace::Op& op) {
  const std::vector<int64_t>& shape = op.get_ints("normalized_shape");
  const Tensor& x = op.inputs[0];
  std::string scale = optional_in(L, op, 1);
  if (scale.empty()) scale = L.tensor_constant(ones(shape, {.dtype = x.dtype()}), "ones");
  std::vector<std::string> inputs = {L.name_of(x), scale};
  if (const std::string b = optional_in(L, op, 2); !b.empty()) inputs.push_back(b);
  return L.emit("LayerNormalization", inputs,
                {{"axis", -static_cast<int64_t>(shape.size())},
                 {"epsilon", static_cast<float>(op.get_double("eps"))}});
}

// --- activations: one per row of core/kernel/activation.h ----------------------------

double parameter(const trace::Op& op, size_t i) { return op.get_doubles("parameters").at(i); }

std::string clip(Lowering& L, const std::string& x, DType dtype, double lo, double hi) {
  auto bound = [&](double v) { return std::isinf(v) ? std::string() : L.scalar(v, dtype); };
  return L.emit("Clip", {x, bound(lo), bound(hi)});
}

// x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))
std::string gelu(Lowering& L, const std::string& x, DType t) {
  std::string e = L.emit("Erf", {L.emit("Mul", {x, L.scalar(1.0 / std::numbers::sqrt2, t)})});
  return L.emit("Mul", {L.emit("Mul", {x, L.scalar(0.5, t)}), L.emit("Add", {e, L.scalar(1.0, t)})});
}

// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
std::string gelu_tanh(Lowering& L, const std::string& x, DType t) {
  std::string cube = L.emit("Mul", {L.emit("Mul", {x, x}), x});
  std::string inner = L.emit("Add", {x, L.emit("Mul", {cube, L.scalar(0.044715, t)})});
  std::string th = L.emit("Tanh", {L.emit("Mul", {inner, L.scalar(std::numbers::sqrt2 * std::numbers::inv_sqrtpi, t)})});
  return L.emit("Mul", {L.emit("Mul", {x, L.scalar(0.5, t)}), L.emit("Add", {th, L.scalar(1.0, t)})});
}

// log(1 + exp(beta x)) / beta, linear above beta x = 20 (PyTorch's threshold).
std::string softplus(Lowering& L, const std::string& x, DType t, double beta) {
  std::string bx = beta == 1.0 ? x : L.emit("Mul", {x, L.scalar(beta, t)});
  std::string soft = L.emit("Softplus", {bx});
  if (beta != 1.0) soft = L.emit("Div", {soft, L.scalar(beta, t)});
  std::string linear_part = L.emit("Greater", {bx, L.scalar(20.0, t)});
  return L.emit("Where", {linear_part, x, soft});
}

// The row `n` (an activation op's name, or batch_norm_activation's "activation") of x.
std::string activation(Lowering& L, const trace::Op& op, const std::string& x, std::string_view n) {
  const DType t = op.inputs[0].dtype();
  if (n == "relu") return L.emit("Relu", {x});
  if (n == "sigmoid") return L.emit("Sigmoid", {x});
  if (n == "tanh") return L.emit("Tanh", {x});
  if (n == "gelu") return gelu(L, x, t);
  if (n == "gelu_tanh") return gelu_tanh(L, x, t);
  if (n == "silu") return L.emit("Mul", {x, L.emit("Sigmoid", {x})});
  if (n == "elu") return L.emit("Elu", {x}, {{"alpha", static_cast<float>(parameter(op, 0))}});
  if (n == "leaky_relu") return L.emit("LeakyRelu", {x}, {{"alpha", static_cast<float>(parameter(op, 0))}});
  if (n == "softplus") return softplus(L, x, t, parameter(op, 0));
  if (n == "mish") return L.emit("Mul", {x, L.emit("Tanh", {softplus(L, x, t, 1.0)})});
  if (n == "hardswish") return L.emit("HardSwish", {x});
  if (n == "hardtanh" || n == "relu6") return clip(L, x, t, parameter(op, 0), parameter(op, 1));
  L.fail("an activation row without an ONNX form: add it to onnx/lower_ops.cc");
}

// --- elementwise --------------------------------------------------------------------------

// Input i of op, cast to dtype t where it has another.
std::string in_as(Lowering& L, const trace::Op& op, size_t i, DType t) {
  const std::string name = in(L, op, i);
  if (op.inputs.at(i).dtype() == t) return name;
  return L.emit("Cast", {name}, {{"to", static_cast<int64_t>(proto::element_type(t))}});
}

// a and b in the output's dtype (a Bool mask times a float, or bf16 meeting fp32).
std::pair<std::string, std::string> binary_operands(Lowering& L, const trace::Op& op) {
  return {in_as(L, op, 0, dtype_of(op)), in_as(L, op, 1, dtype_of(op))};
}

void add_like(Lowering& L, const trace::Op& op, const char* onnx_op) {
  if (op.name == "add" && dtype_of(op) == DType::Bool) {  // two masks add to their logical or
    out(L, op, L.emit("Or", {in(L, op, 0), in(L, op, 1)}));
    return;
  }
  auto [a, b] = binary_operands(L, op);
  const double alpha = op.get_double("alpha");
  if (alpha != 1.0) b = L.emit("Mul", {b, L.scalar(alpha, dtype_of(op))});
  out(L, op, L.emit(onnx_op, {a, b}));
}

Row binary(const char* onnx_op) {
  return [onnx_op](Lowering& L, const trace::Op& op) {
    if (op.name == "mul" && dtype_of(op) == DType::Bool) {
      out(L, op, L.emit("And", {in(L, op, 0), in(L, op, 1)}));
      return;
    }
    auto [a, b] = binary_operands(L, op);
    out(L, op, L.emit(onnx_op, {a, b}));
  };
}

// x op scalar, or scalar op x when `scalar_first`.
Row with_scalar(const char* onnx_op, bool scalar_first = false) {
  return [=](Lowering& L, const trace::Op& op) {
    std::string x = in(L, op, 0);
    const DType t = dtype_of(op);
    if (op.inputs[0].dtype() != t) x = L.emit("Cast", {x}, {{"to", static_cast<int64_t>(proto::element_type(t))}});
    const std::string s = L.scalar(op.get_double("scalar"), t);
    out(L, op, L.emit(onnx_op, scalar_first ? std::vector<std::string>{s, x} : std::vector<std::string>{x, s}));
  };
}

// The input in the output's dtype: exp, log, sqrt, sin, cos of an integer or Bool tensor are float32.
Row unary(const char* onnx_op) {
  return [onnx_op](Lowering& L, const trace::Op& op) { out(L, op, L.emit(onnx_op, {in_as(L, op, 0, dtype_of(op))})); };
}

// The floating functions ONNX has no op for, composed of those it has: log1p as
// Log(1 + x) and expm1 as Exp(x) - 1 (so they lose what 1 + x rounds away near
// 0), log2 and log10 as Log(x) / ln b, rsqrt as Reciprocal(Sqrt(x)).
void add_composed_math_rows(std::map<std::string, Row, std::less<>>& r) {
  r["log1p"] = [](Lowering& L, const trace::Op& op) {
    const DType t = dtype_of(op);
    out(L, op, L.emit("Log", {L.emit("Add", {in_as(L, op, 0, t), L.scalar(1.0, t)})}));
  };
  r["expm1"] = [](Lowering& L, const trace::Op& op) {
    const DType t = dtype_of(op);
    out(L, op, L.emit("Sub", {L.emit("Exp", {in_as(L, op, 0, t)}), L.scalar(1.0, t)}));
  };
  for (const auto& [name, base] : {std::pair{"log2", std::numbers::ln2}, std::pair{"log10", std::numbers::ln10}}) {
    r[name] = [base](Lowering& L, const trace::Op& op) {
      const DType t = dtype_of(op);
      out(L, op, L.emit("Div", {L.emit("Log", {in_as(L, op, 0, t)}), L.scalar(base, t)}));
    };
  }
  r["rsqrt"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Reciprocal", {L.emit("Sqrt", {in_as(L, op, 0, dtype_of(op))})}));
  };
  // (x > 0) - (x < 0), which is 0 for NaN as Loom's sign (ONNX's Sign leaves NaN's sign unspecified).
  r["sign"] = [](Lowering& L, const trace::Op& op) {
    const DType t = dtype_of(op);
    const std::string x = in(L, op, 0), zero = L.scalar(0.0, t);
    if (!is_floating(t)) return out(L, op, L.emit("Sign", {x}));
    const auto as_t = [&](const std::string& mask) {
      return L.emit("Cast", {mask}, {{"to", static_cast<int64_t>(proto::element_type(t))}});
    };
    out(L, op, L.emit("Sub", {as_t(L.emit("Greater", {x, zero})), as_t(L.emit("Less", {x, zero}))}));
  };
}

// floor, ceil, round and trunc of float x: `lower` emits the nodes. ONNX rounds
// floats only; an integer tensor is its own result.
Row rounding(std::string (*lower)(Lowering&, const std::string&, DType)) {
  return [lower](Lowering& L, const trace::Op& op) {
    const std::string x = in(L, op, 0);
    out(L, op, is_floating(dtype_of(op)) ? lower(L, x, dtype_of(op)) : L.emit("Identity", {x}));
  };
}

// Toward zero, which opset 17 has no op for: Ceil below zero, Floor elsewhere (-0.5 -> -0, NaN stays).
std::string trunc_of(Lowering& L, const std::string& x, DType t) {
  return L.emit("Where", {L.emit("Less", {x, L.scalar(0.0, t)}), L.emit("Ceil", {x}), L.emit("Floor", {x})});
}

// Python's a % b, as PyTorch computes it: Mod (fmod = 0) for integers; for floats
// (which ONNX takes with fmod = 1 only) C's fmod, moved by b where its sign differs from b's.
std::string python_remainder(Lowering& L, const std::string& a, const std::string& b, DType t) {
  if (!is_floating(t)) return L.emit("Mod", {a, b}, {{"fmod", int64_t{0}}});
  const std::string mod = L.emit("Mod", {a, b}, {{"fmod", int64_t{1}}}), zero = L.scalar(0.0, t);
  const std::string differ = L.emit("Xor", {L.emit("Less", {b, zero}), L.emit("Less", {mod, zero})});
  const std::string moved = L.emit("And", {L.emit("Not", {L.emit("Equal", {mod, zero})}), differ});
  return L.emit("Where", {moved, L.emit("Add", {mod, b}), mod});
}

// Python's a // b, as PyTorch computes it (kernel::math's floor divisions). Integers:
// a - a % b is a multiple of b, which Div (truncating for integers) divides exactly.
// Floats: from the exact fmod, not Floor(Div), whose rounded quotient can land on the
// next integer (1 // 0.1 is 9, not 10); a zero quotient takes a / b's sign, a zero b gives a / b.
std::string python_floor_divide(Lowering& L, const std::string& a, const std::string& b, DType t) {
  if (!is_floating(t)) return L.emit("Div", {L.emit("Sub", {a, python_remainder(L, a, b, t)}), b});
  const std::string zero = L.scalar(0.0, t), one = L.scalar(1.0, t), quotient = L.emit("Div", {a, b});
  const std::string mod = L.emit("Mod", {a, b}, {{"fmod", int64_t{1}}});
  const std::string differ = L.emit("And", {L.emit("Not", {L.emit("Equal", {mod, zero})}),
                                            L.emit("Xor", {L.emit("Less", {b, zero}), L.emit("Less", {mod, zero})})});
  std::string q = L.emit("Div", {L.emit("Sub", {a, mod}), b});
  q = L.emit("Where", {differ, L.emit("Sub", {q, one}), q});
  std::string floored = L.emit("Floor", {q});
  const std::string up = L.emit("Greater", {L.emit("Sub", {q, floored}), L.scalar(0.5, t)});
  floored = L.emit("Where", {up, L.emit("Add", {floored, one}), floored});
  floored = L.emit("Where", {L.emit("Equal", {q, zero}), L.emit("Mul", {zero, quotient}), floored});
  return L.emit("Where", {L.emit("Equal", {b, zero}), quotient, floored});
}

// Where floor_divide's and remainder's operands come from: two tensors, a tensor and a
// number (floor_divide_scalar), or the number first (rfloor_divide: 7 // x).
enum class Operands { Tensors, TensorNumber, NumberTensor };

// floor_divide and remainder of `operands`, in the output's dtype.
Row python_division(std::string (*lower)(Lowering&, const std::string&, const std::string&, DType),
                    Operands operands) {
  return [=](Lowering& L, const trace::Op& op) {
    const DType t = dtype_of(op);
    const std::string x = in_as(L, op, 0, t);
    if (operands == Operands::Tensors) return out(L, op, lower(L, x, in_as(L, op, 1, t), t));
    const std::string s = L.scalar(op.get_double("scalar"), t);
    out(L, op, operands == Operands::TensorNumber ? lower(L, x, s, t) : lower(L, s, x, t));
  };
}

// torch.round(x, decimals): Round(x * 10^d) / 10^d, or Round(x / 10^-d) * 10^-d, in x's
// dtype, a 16-bit x in float32 (as Loom and PyTorch's CPU kernel compute it); ONNX's
// Round is half to even, as torch.round.
std::string round_decimals(Lowering& L, const std::string& x_in, DType t, int64_t decimals) {
  const DType c = is_half_precision(t) ? DType::Float32 : t;
  const auto cast = [&](const std::string& v, DType to) {
    return L.emit("Cast", {v}, {{"to", static_cast<int64_t>(proto::element_type(to))}});
  };
  const std::string x = c == t ? x_in : cast(x_in, c);
  const std::string scale = L.scalar(std::pow(10.0, std::fabs(static_cast<double>(decimals))), c);
  const std::string whole = L.emit("Round", {L.emit(decimals > 0 ? "Mul" : "Div", {x, scale})});
  const std::string y = L.emit(decimals > 0 ? "Div" : "Mul", {whole, scale});
  return c == t ? y : cast(y, t);
}

// --- comparisons and masks ----------------------------------------------------------------

// a op b in the dtype they promote to, as Loom compares (ONNX orders no bools:
// those compare as uint8); `negate` makes ne of Equal.
Row comparison(const char* onnx_op, bool negate = false) {
  return [=](Lowering& L, const trace::Op& op) {
    DType t = promote_types(op.inputs.at(0).dtype(), op.inputs.at(1).dtype());
    if (t == DType::Bool && std::string_view(onnx_op) != "Equal") t = DType::UInt8;
    const std::string y = L.emit(onnx_op, {in_as(L, op, 0, t), in_as(L, op, 1, t)});
    out(L, op, negate ? L.emit("Not", {y}) : y);
  };
}

// x op number: a floating x in its own dtype (the number rounded to it, as
// Loom compares), any other x in float64.
Row scalar_comparison(const char* onnx_op, bool negate = false) {
  return [=](Lowering& L, const trace::Op& op) {
    const double scalar = op.get_double("scalar");
    const DType t = scalar_comparison_dtype(op.inputs.at(0).dtype(), scalar);
    const std::string y = L.emit(onnx_op, {in_as(L, op, 0, t), L.scalar(scalar, t)});
    out(L, op, negate ? L.emit("Not", {y}) : y);
  };
}

// A logical op on the truth of its inputs (nonzero, NaN included, is true, as ONNX casts to bool).
Row logical(const char* onnx_op, size_t arity) {
  return [=](Lowering& L, const trace::Op& op) {
    std::vector<std::string> inputs;
    for (size_t i = 0; i < arity; ++i) inputs.push_back(in_as(L, op, i, DType::Bool));
    out(L, op, L.emit(onnx_op, inputs));
  };
}

// torch.isclose: a == b, both NaN under equal_nan, or a finite |a - b| within atol + |rtol * b|,
// in what Loom's kernel computes in (16-bit floats as float32, integers and Bool as float64).
void isclose(Lowering& L, const trace::Op& op) {
  const DType in = op.inputs.at(0).dtype();
  const DType t = !is_floating(in) ? DType::Float64 : is_half_precision(in) ? DType::Float32 : in;
  const std::string a = in_as(L, op, 0, t), b = in_as(L, op, 1, t);
  const std::string diff = L.emit("Abs", {L.emit("Sub", {a, b})});
  const std::string relative = L.emit("Abs", {L.emit("Mul", {L.scalar(op.get_double("rtol"), t), b})});
  const std::string tolerance = L.emit("Add", {L.scalar(op.get_double("atol"), t), relative});
  const std::string within =
      L.emit("And", {L.emit("LessOrEqual", {diff, tolerance}), L.emit("Not", {L.emit("IsInf", {diff})})});
  std::string y = L.emit("Or", {L.emit("Equal", {a, b}), within});
  if (op.get_int("equal_nan") != 0) {
    y = L.emit("Or", {y, L.emit("And", {L.emit("IsNaN", {a}), L.emit("IsNaN", {b})})});
  }
  out(L, op, y);
}

// --- pooling ------------------------------------------------------------------------------

Attrs pool_attributes(const trace::Op& op) {
  return {{"kernel_shape", op.get_ints("kernel_size")},
          {"strides", op.get_ints("stride")},
          {"pads", pair_pads(op.get_ints("padding"))},
          {"ceil_mode", op.get_int("ceil_mode")}};
}

void avg_pool(Lowering& L, const trace::Op& op) {
  Attrs a = pool_attributes(op);
  a.push_back({"count_include_pad", op.get_int("count_include_pad")});
  out(L, op, L.emit("AveragePool", {in(L, op, 0)}, a));
}

// --- shapes -------------------------------------------------------------------------------

// The target shape; one batch-following dim reads -1 (Reshape infers it).
void reshape(Lowering& L, const trace::Op& op) {
  std::vector<SymInt> dims = L.sym_ints("shape");
  int symbolic = 0;
  for (const SymInt& d : dims) symbolic += d.symbolic() ? 1 : 0;
  if (symbolic == 1) {
    for (SymInt& d : dims) d = d.symbolic() ? SymInt{0, -1} : d;
  }
  out(L, op, L.emit("Reshape", {in(L, op, 0), L.shape(dims)}));
}

void slice(Lowering& L, const trace::Op& op) {
  const int64_t d = op.get_int("dim");
  const SymInt start = L.sym_int("start"), end = L.sym_int("end");
  if (start.symbolic()) L.fail("the slice's start follows the batch size; export with a fixed batch");
  // An end at the dim's size reads "to the end", whatever the batch size.
  const bool to_end = end.symbolic() || end.b == op.inputs[0].size(d);
  if (end.symbolic() && op.inputs[0].size(d) != end.b) {
    L.fail("the slice's end follows the batch size but is not the dim's size; export with a fixed batch");
  }
  const int64_t stop = to_end ? std::numeric_limits<int64_t>::max() : end.b;
  out(L, op, L.emit("Slice", {in(L, op, 0), L.ints({start.b}), L.ints({stop}), L.ints({d}), L.ints({op.get_int("step")})}));
}

void select(Lowering& L, const trace::Op& op) {
  const Tensor index = full({}, static_cast<double>(op.get_int("index")), {.dtype = DType::Int64});
  out(L, op, L.emit("Gather", {in(L, op, 0), L.tensor_constant(index, "index")}, {{"axis", op.get_int("dim")}}));
}

void cat(Lowering& L, const trace::Op& op) {
  std::vector<std::string> parts;
  const DType t = dtype_of(op);
  for (const Tensor& x : op.inputs) {
    // Concat takes one rank: leave out the 1-D tensors without elements cat skipped beside others.
    if (cat_skips(x) && op.outputs[0].dim() != 1) continue;
    const std::string name = L.name_of(x);
    parts.push_back(x.dtype() == t ? name : L.emit("Cast", {name}, {{"to", static_cast<int64_t>(proto::element_type(t))}}));
  }
  out(L, op, L.emit("Concat", parts, {{"axis", op.get_int("dim")}}));
}

void stack(Lowering& L, const trace::Op& op) {
  std::vector<std::string> parts;
  const std::string axes = L.ints({op.get_int("dim")});
  for (const Tensor& x : op.inputs) parts.push_back(L.emit("Unsqueeze", {L.name_of(x), axes}));
  out(L, op, L.emit("Concat", parts, {{"axis", op.get_int("dim")}}));
}

// PyTorch's pad list runs from the last dim back, (begin, end) per dim;
// negative entries crop (a Slice), positive ones pad.
void pad(Lowering& L, const trace::Op& op) {
  const std::vector<int64_t>& pads = op.get_ints("pads");
  const Tensor& x = op.inputs[0];
  const int64_t rank = x.dim();
  std::vector<int64_t> begin(rank, 0), end(rank, 0);
  for (size_t i = 0; i < pads.size(); ++i) {
    const int64_t d = rank - 1 - static_cast<int64_t>(i / 2);
    (i % 2 == 0 ? begin : end)[d] = pads[i];
  }
  std::string y = L.name_of(x);
  std::vector<int64_t> starts, stops, axes, grow;
  for (int64_t d = 0; d < rank; ++d) {
    if (begin[d] < 0 || end[d] < 0) {
      starts.push_back(std::max<int64_t>(-begin[d], 0));
      stops.push_back(end[d] < 0 ? end[d] : std::numeric_limits<int64_t>::max());
      axes.push_back(d);
    }
  }
  if (!axes.empty()) y = L.emit("Slice", {y, L.ints(starts), L.ints(stops), L.ints(axes)});
  for (int64_t d = 0; d < rank; ++d) grow.push_back(std::max<int64_t>(begin[d], 0));
  for (int64_t d = 0; d < rank; ++d) grow.push_back(std::max<int64_t>(end[d], 0));
  const std::string& mode = op.get_string("mode");
  const std::string onnx_mode = mode == "replicate" ? "edge" : mode;
  std::vector<std::string> inputs = {y, L.ints(grow)};
  if (mode == "constant") inputs.push_back(L.scalar(op.get_double("value"), x.dtype()));
  out(L, op, L.emit("Pad", inputs, {{"mode", onnx_mode}}));
}

// PyTorch's index mappings: nearest floor(dst * H / P), bilinear half-pixel
// (or align_corners); a kept scale factor maps by 1 / scale, as Resize's scales do.
void interpolate(Lowering& L, const trace::Op& op) {
  const bool nearest = op.get_string("mode") == "nearest";
  Attrs a;
  if (nearest) {
    a = {{"mode", std::string("nearest")}, {"coordinate_transformation_mode", std::string("asymmetric")},
         {"nearest_mode", std::string("floor")}};
  } else {
    a = {{"mode", std::string("linear")},
         {"coordinate_transformation_mode",
          std::string(op.get_int("align_corners") != 0 ? "align_corners" : "pytorch_half_pixel")}};
  }
  const std::string x = in(L, op, 0);
  if (op.has("scale_factor")) {
    const std::vector<double>& s = op.get_doubles("scale_factor");
    const Tensor scales = tensor({1.0, 1.0, s[0], s[1]}, {4});
    out(L, op, L.emit("Resize", {x, "", L.tensor_constant(scales, "scales")}, a));
    return;
  }
  const Tensor& y = op.outputs[0];
  const std::string lead = L.emit("Shape", {x}, {{"start", int64_t{0}}, {"end", int64_t{2}}});
  const std::string sizes = L.emit("Concat", {lead, L.ints({y.size(2), y.size(3)})}, {{"axis", int64_t{0}}});
  out(L, op, L.emit("Resize", {x, "", "", sizes}, a));
}

// x in the op's output dtype: a Cast where they differ (a mask's sum counts in int64, its mean is float32).
std::string in_output_dtype(Lowering& L, const trace::Op& op) {
  const std::string x = in(L, op, 0);
  if (op.inputs.at(0).dtype() == dtype_of(op)) return x;
  return L.emit("Cast", {x}, {{"to", static_cast<int64_t>(proto::element_type(dtype_of(op)))}});
}

// sum / mean over dims (ReduceSum takes its axes as an input in opset 17, ReduceMean as an attribute).
void reduce(Lowering& L, const trace::Op& op) {
  const std::vector<int64_t>& dims = op.get_ints("dims");
  const int64_t keep = op.get_int("keepdim");
  const std::string x = in_output_dtype(L, op);
  if (op.name == "sum") {
    out(L, op, L.emit("ReduceSum", {x, L.ints(dims)}, {{"keepdims", keep}}));
  } else {
    out(L, op, L.emit("ReduceMean", {x}, {{"axes", dims}, {"keepdims", keep}}));
  }
}

void max_dim(Lowering& L, const trace::Op& op) {
  const int64_t d = op.get_int("dim"), keep = op.get_int("keepdim");
  const std::string x = in(L, op, 0);
  L.bind(op.outputs[0], L.emit("ReduceMax", {x}, {{"axes", std::vector<int64_t>{d}}, {"keepdims", keep}}));
  L.bind(op.outputs[1], L.emit("ArgMax", {x}, {{"axis", d}, {"keepdims", keep}}));
}

// sort and topk as TopK, which puts equal elements in order of position whichever way
// it sorts, as Loom's stable sort does; sort takes its whole dim, read from the
// input's shape so that a dynamic batch dim works. (NaN's place is unspecified there.)
void top_k(Lowering& L, const trace::Op& op) {
  if (op.inputs.at(0).dim() == 0) L.fail("TopK needs a dim to order along; a 0-d tensor is its own sort");
  const std::string x = in(L, op, 0);
  const int64_t d = op.get_int("dim");
  const bool whole = op.name == "sort";
  const std::string k = whole ? L.emit("Shape", {x}, {{"start", d}, {"end", d + 1}}) : L.ints({op.get_int("k")});
  const int64_t largest = op.get_int(whole ? "descending" : "largest");
  const auto outputs = L.emit_n("TopK", {x, k}, 2, {{"axis", d}, {"largest", largest}, {"sorted", int64_t{1}}});
  L.bind(op.outputs.at(0), outputs[0]);
  L.bind(op.outputs.at(1), outputs[1]);
}

// The median's rank along dim d, (n - 1) / 2 + 1, with n read from x's shape
// in the graph so that a dynamic batch dim works.
std::string median_rank(Lowering& L, const std::string& x, int64_t d, const std::string& one) {
  const std::string n = L.emit("Shape", {x}, {{"start", d}, {"end", d + 1}});
  const std::string half = L.emit("Div", {L.emit("Sub", {n, one}), L.ints({2})});
  return L.emit("Add", {half, one});
}

// kthvalue as the last of TopK's k smallest, and median along a dim as the
// median_rank-th smallest; TopK keeps equal elements in order of position, as
// sort does. NaN's place is unspecified there, so median's NaN rule is not kept.
void ranked(Lowering& L, const trace::Op& op) {
  if (op.inputs.at(0).dim() == 0) {
    L.fail("a 0-d tensor is its own k-th value and median; call it on a 1-element vector");
  }
  const int64_t d = op.get_int("dim");
  const std::string x = in(L, op, 0), one = L.ints({1});
  const std::string k = op.name == "kthvalue" ? L.ints({op.get_int("k")}) : median_rank(L, x, d, one);
  const auto top = L.emit_n("TopK", {x, k}, 2, {{"axis", d}, {"largest", int64_t{0}}, {"sorted", int64_t{1}}});
  const std::string before = L.emit("Sub", {k, one});
  for (size_t i = 0; i < 2; ++i) {
    std::string y = L.emit("Slice", {top[i], before, k, L.ints({d})});
    if (!op.get_int("keepdim")) y = L.emit("Squeeze", {y, L.ints({d})});
    L.bind(op.outputs.at(i), y);
  }
}

// prod over its dims in its result's dtype (int64 for integer and Bool inputs).
void product(Lowering& L, const trace::Op& op) {
  const int64_t keep = op.get_int("keepdim");
  out(L, op, L.emit("ReduceProd", {in_output_dtype(L, op)}, {{"axes", op.get_ints("dims")}, {"keepdims", keep}}));
}

// cumsum in its result's dtype (int64 for integer and Bool inputs).
void cumulative_sum(Lowering& L, const trace::Op& op) {
  const std::string dim = L.scalar(static_cast<double>(op.get_int("dim")), DType::Int64);
  out(L, op, L.emit("CumSum", {in_output_dtype(L, op), dim}));
}

// --- indexing ------------------------------------------------------------------------------

// An index input as int64 (ONNX's ScatterElements and Gather take int32 or int64; Loom's any integer).
std::string index_in(Lowering& L, const trace::Op& op, size_t i) { return in_as(L, op, i, DType::Int64); }

// ScatterElements along dim into data: updates (of indices' shape) written, or added
// for reduction "add". A 0-d x (Loom's scatter reads it as 1-D) goes through (1).
std::string scatter_elements(Lowering& L, const trace::Op& op, std::string data, std::string indices,
                             std::string updates, const char* reduction) {
  const bool zero_d = op.inputs.at(0).dim() == 0;
  if (zero_d) {
    for (std::string* v : {&data, &indices, &updates}) *v = L.emit("Reshape", {*v, L.ints({1})});
  }
  const std::string y = L.emit("ScatterElements", {data, indices, updates},
                               {{"axis", op.get_int("dim")}, {"reduction", std::string(reduction)}});
  return zero_d ? L.emit("Reshape", {y, L.ints(std::vector<int64_t>{})}) : y;
}

// src cut to index's shape where it is larger (scatter reads only that corner, as torch.scatter).
std::string src_at_index(Lowering& L, const trace::Op& op, const std::string& index) {
  const Tensor &src = op.inputs.at(2), &idx = op.inputs.at(1);
  if (src.sizes() == idx.sizes()) return in(L, op, 2);
  std::vector<int64_t> axes(static_cast<size_t>(idx.dim()));
  std::iota(axes.begin(), axes.end(), int64_t{0});
  return L.emit("Slice", {in(L, op, 2), L.ints(std::vector<int64_t>(axes.size(), 0)), L.emit("Shape", {index}),
                          L.ints(axes)});
}

// scatter and scatter_add (src a tensor), scatter of a value (op attribute "value").
void scatter(Lowering& L, const trace::Op& op) {
  const std::string index = index_in(L, op, 1);
  const std::string updates =
      op.has("value") ? L.emit("Expand", {L.scalar(op.get_double("value"), dtype_of(op)), L.emit("Shape", {index})})
                      : src_at_index(L, op, index);
  out(L, op, scatter_elements(L, op, in(L, op, 0), index, updates, op.name == "scatter_add" ? "add" : "none"));
}

// index_add: the 1-D index laid along dim and expanded to source's shape, source * alpha added there.
void index_add(Lowering& L, const trace::Op& op) {
  const Tensor& x = op.inputs.at(0);
  const int64_t d = op.get_int("dim");
  std::string source = in(L, op, 2);
  if (op.inputs.at(2).dim() == 0) source = L.emit("Reshape", {source, L.ints({1})});
  std::vector<int64_t> along(static_cast<size_t>(std::max<int64_t>(x.dim(), 1)), 1);
  along[static_cast<size_t>(d)] = -1;
  const std::string index = L.emit("Expand", {L.emit("Reshape", {index_in(L, op, 1), L.ints(along)}),
                                              L.emit("Shape", {source})});
  if (const double alpha = op.get_double("alpha"); alpha != 1.0) {
    source = L.emit("Mul", {source, L.scalar(alpha, dtype_of(op))});
  }
  out(L, op, scatter_elements(L, op, in(L, op, 0), index, source, "add"));
}

// bincount: max(max(x) + 1, minlength) zeros, with ones (or the weights) added at x.
// (Over an empty x ONNX's ReduceMax has no value; Loom gives minlength zeros.)
void bincount(Lowering& L, const trace::Op& op) {
  const DType t = dtype_of(op);
  const std::string x = index_in(L, op, 0);
  const std::string top = L.emit("Add", {L.emit("ReduceMax", {x}, {{"keepdims", int64_t{1}}}), L.ints({1})});
  const std::string bins = L.emit("Max", {top, L.ints({op.get_int("minlength")})});
  const std::string updates = op.inputs.at(1).defined() ? in_as(L, op, 1, t)
                                                        : L.emit("Expand", {L.scalar(1.0, t), L.emit("Shape", {x})});
  out(L, op, L.emit("ScatterElements", {L.emit("Expand", {L.scalar(0.0, t), bins}), x, updates},
                    {{"axis", int64_t{0}}, {"reduction", std::string("add")}}));
}

// masked_select: x and the mask broadcast against each other (Expand broadcasts both
// ways), then Compress, which reads its input flattened in row-major order.
void masked_select(Lowering& L, const trace::Op& op) {
  const std::string x = in(L, op, 0), mask = in(L, op, 1);
  const std::string flat_mask = L.emit("Reshape", {L.emit("Expand", {mask, L.emit("Shape", {x})}), L.ints({-1})});
  out(L, op, L.emit("Compress", {L.emit("Expand", {x, L.emit("Shape", {mask})}), flat_mask}));
}

// nonzero (argwhere): NonZero's (rank, K) coordinates, transposed to Loom's (K, rank).
void nonzero(Lowering& L, const trace::Op& op) {
  if (op.inputs.at(0).dim() == 0) {
    L.fail("ONNX's NonZero of a 0-d tensor is not torch.nonzero's (K, 0); reshape the input to 1-D first");
  }
  const std::string coordinates = L.emit("NonZero", {in(L, op, 0)});
  out(L, op, L.emit("Transpose", {coordinates}, {{"perm", std::vector<int64_t>{1, 0}}}));
}

Row refuse(std::string why) {
  return [why](Lowering& L, const trace::Op&) { L.fail(why); };
}

void add_activation_rows(std::map<std::string, Row, std::less<>>& rows) {
  for (const char* name : {"relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "elu", "leaky_relu", "softplus",
                           "mish", "hardswish", "hardtanh", "relu6"}) {
    rows[name] = [](Lowering& L, const trace::Op& op) { out(L, op, activation(L, op, in(L, op, 0), op.name)); };
  }
}

// rnn_layer (one layer, one direction) as ONNX's RNN, LSTM or GRU node. The
// weights keep PyTorch's layout under their state_dict names; a Gather of rows
// reorders their gate blocks (i f g o and r z n) into ONNX's (i o f c and z r
// h) and an Unsqueeze adds the num_directions axis; B is the two biases end to
// end. PyTorch's GRU applies the reset gate after the recurrent product
// (linear_before_reset = 1). An initial state not given is left out (zeros),
// so its batch size is not fixed. Y (L, 1, N, H) and the final states (1, N,
// H) lose that axis again.
void rnn_layer(Lowering& L, const trace::Op& op) {
  const std::string& mode = op.get_string("mode");
  const bool lstm = mode == "LSTM", gru = mode == "GRU";
  const std::vector<int64_t> gate_order = lstm ? std::vector<int64_t>{0, 3, 1, 2}
                                          : gru ? std::vector<int64_t>{1, 0, 2}
                                                : std::vector<int64_t>{0};
  const int64_t hidden = op.inputs.at(4).size(1);
  std::vector<int64_t> rows;
  for (int64_t gate : gate_order) {
    for (int64_t r = 0; r < hidden; ++r) rows.push_back(gate * hidden + r);
  }
  const std::string order = L.ints(rows), axis0 = L.ints({0});
  const auto gates = [&](size_t i) { return L.emit("Gather", {in(L, op, i), order}, {{"axis", int64_t{0}}}); };
  const auto leading = [&](const std::string& v) { return v.empty() ? v : L.emit("Unsqueeze", {v, axis0}); };
  const std::string bias =
      op.inputs.at(5).defined() ? L.emit("Concat", {gates(5), gates(6)}, {{"axis", int64_t{0}}}) : "";
  std::vector<std::string> inputs{in(L, op, 0), leading(gates(3)), leading(gates(4)), leading(bias), "",
                                  leading(optional_in(L, op, 1))};
  if (lstm) inputs.push_back(leading(optional_in(L, op, 2)));
  while (inputs.back().empty()) inputs.pop_back();
  Attrs attributes{{"hidden_size", hidden},
                   {"direction", std::string(op.get_int("reverse") != 0 ? "reverse" : "forward")}};
  if (gru) attributes.push_back({"linear_before_reset", int64_t{1}});
  if (mode == "RNN_RELU") attributes.push_back({"activations", std::vector<std::string>{"Relu"}});
  const std::vector<std::string> ys = L.emit_n(lstm ? "LSTM" : gru ? "GRU" : "RNN", inputs, lstm ? 3 : 2,
                                               std::move(attributes));
  L.bind(op.outputs.at(0), L.emit("Squeeze", {ys[0], L.ints({1})}));
  for (size_t k = 1; k < ys.size(); ++k) L.bind(op.outputs.at(k), L.emit("Squeeze", {ys[k], axis0}));
}

// dropout(softmax(q k^T * scale + mask)) of scaled_dot_product_attention or
// attention_weights (the mask, if any, is input 3 or 2; the causal mask a
// constant of the traced L and S); a row a given mask leaves no key gets zero
// weights, as Loom's op gives (ONNX's Softmax of all -inf is NaN).
std::string attention_weights(Lowering& L, const trace::Op& op, size_t mask_input) {
  if (op.get_double("dropout_p") > 0) {
    L.fail("attention dropout draws random masks; export with dropout_p = 0 (nn::MultiheadAttention in eval())");
  }
  const Tensor& q = op.inputs.at(0);
  const Tensor& k = op.inputs.at(1);
  std::vector<int64_t> perm(static_cast<size_t>(k.dim()));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::swap(perm[perm.size() - 2], perm[perm.size() - 1]);
  const DType t = dtype_of(op);
  const std::string scores = L.emit("MatMul", {in(L, op, 0), L.emit("Transpose", {in(L, op, 1)}, {{"perm", perm}})});
  std::string scaled = L.emit("Mul", {scores, L.scalar(op.get_double("scale"), t)});
  const bool causal = op.get_int("is_causal") != 0;
  const bool given = op.inputs.size() > mask_input && op.inputs[mask_input].defined();
  if (causal || (given && op.inputs[mask_input].dtype() == DType::Bool)) {  // true where the score takes part
    const std::string keep =
        causal ? L.tensor_constant(logical_not(causal_blocked(q.size(-2), k.size(-2))), "causal_mask")
               : in(L, op, mask_input);
    scaled = L.emit("Where", {keep, scaled, L.scalar(-INFINITY, t)});
  } else if (given) {
    scaled = L.emit("Add", {scaled, in_as(L, op, mask_input, t)});
  }
  if (!given) return L.emit("Softmax", {scaled}, {{"axis", int64_t{-1}}});  // a causal row keeps key 0
  const std::string row_max =
      L.emit("ReduceMax", {scaled}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}});
  const std::string empty = L.emit("IsInf", {row_max}, {{"detect_positive", int64_t{0}}});
  const std::string zero = L.scalar(0.0, t);
  const std::string weights = L.emit("Softmax", {L.emit("Where", {empty, zero, scaled})}, {{"axis", int64_t{-1}}});
  return L.emit("Where", {empty, zero, weights});
}

// Convolutions, linear layers and norms, fused forms included.
void add_layer_rows(std::map<std::string, Row, std::less<>>& r) {
  r["conv2d"] = [](Lowering& L, const trace::Op& op) { out(L, op, conv(L, op, in(L, op, 0))); };
  r["conv2d_bias_relu"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Relu", {conv(L, op, in(L, op, 0))}));
  };
  r["relu_conv2d"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, conv(L, op, L.emit("Relu", {in(L, op, 0)})));
  };
  r["conv_transpose2d"] = conv_transpose;
  r["rnn_layer"] = rnn_layer;
  r["linear"] = [](Lowering& L, const trace::Op& op) { out(L, op, linear(L, op)); };
  r["linear_relu"] = [](Lowering& L, const trace::Op& op) { out(L, op, L.emit("Relu", {linear(L, op)})); };
  r["matmul"] = [](Lowering& L, const trace::Op& op) { out(L, op, L.emit("MatMul", {in(L, op, 0), in(L, op, 1)})); };
  r["scaled_dot_product_attention"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("MatMul", {attention_weights(L, op, 3), in(L, op, 2)}));
  };
  r["attention_weights"] = [](Lowering& L, const trace::Op& op) { out(L, op, attention_weights(L, op, 2)); };
  r["batch_norm"] = [](Lowering& L, const trace::Op& op) { out(L, op, batch_norm(L, op)); };
  r["batch_norm_activation"] = [](Lowering& L, const trace::Op& op) {
    std::string y = batch_norm(L, op);
    if (const std::string residual = optional_in(L, op, 5); !residual.empty()) y = L.emit("Add", {y, residual});
    out(L, op, activation(L, op, y, op.get_string("activation")));
  };
  r["layer_norm"] = [](Lowering& L, const trace::Op& op) { out(L, op, layer_norm(L, op)); };
  r["group_norm"] = [](Lowering& L, const trace::Op& op) { out(L, op, group_norm(L, op)); };
  r["instance_norm"] = [](Lowering& L, const trace::Op& op) { out(L, op, instance_norm(L, op)); };
}

// Softmax, arithmetic with tensors and scalars, unary math, clamp and casts.
void add_pointwise_rows(std::map<std::string, Row, std::less<>>& r) {
  r["softmax"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Softmax", {in(L, op, 0)}, {{"axis", op.get_int("dim")}}));
  };
  r["log_softmax"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("LogSoftmax", {in(L, op, 0)}, {{"axis", op.get_int("dim")}}));
  };
  r["add"] = [](Lowering& L, const trace::Op& op) { add_like(L, op, "Add"); };
  r["sub"] = [](Lowering& L, const trace::Op& op) { add_like(L, op, "Sub"); };
  r["mul"] = binary("Mul");
  r["div"] = binary("Div");
  r["pow"] = binary("Pow");
  r["add_scalar"] = with_scalar("Add");
  r["mul_scalar"] = with_scalar("Mul");
  r["div_scalar"] = with_scalar("Div");
  r["pow_scalar"] = with_scalar("Pow");
  r["rsub"] = with_scalar("Sub", /*scalar_first=*/true);
  r["rdiv"] = with_scalar("Div", /*scalar_first=*/true);
  r["neg"] = unary("Neg");
  r["exp"] = unary("Exp");
  r["log"] = unary("Log");
  r["sqrt"] = unary("Sqrt");
  r["abs"] = unary("Abs");
  r["sin"] = unary("Sin");
  r["cos"] = unary("Cos");
  r["tan"] = unary("Tan");
  r["atan"] = unary("Atan");
  r["erf"] = unary("Erf");
  add_composed_math_rows(r);
  r["floor"] = rounding([](Lowering& L, const std::string& x, DType) { return L.emit("Floor", {x}); });
  r["ceil"] = rounding([](Lowering& L, const std::string& x, DType) { return L.emit("Ceil", {x}); });
  // ONNX's Round is half to even, as torch.round; round(x, decimals) records its decimals.
  const Row round_whole = rounding([](Lowering& L, const std::string& x, DType) { return L.emit("Round", {x}); });
  r["round"] = [round_whole](Lowering& L, const trace::Op& op) {
    const int64_t decimals = op.has("decimals") ? op.get_int("decimals") : 0;
    if (decimals == 0) return round_whole(L, op);
    out(L, op, round_decimals(L, in(L, op, 0), dtype_of(op), decimals));
  };
  r["trunc"] = rounding(trunc_of);
  r["floor_divide"] = python_division(python_floor_divide, Operands::Tensors);
  r["floor_divide_scalar"] = python_division(python_floor_divide, Operands::TensorNumber);
  r["rfloor_divide"] = python_division(python_floor_divide, Operands::NumberTensor);
  r["remainder"] = python_division(python_remainder, Operands::Tensors);
  r["remainder_scalar"] = python_division(python_remainder, Operands::TensorNumber);
  r["rremainder"] = python_division(python_remainder, Operands::NumberTensor);
  r["clone"] = unary("Identity");
  r["to_device"] = unary("Identity");
  // An integer x is clamped in its dtype (Clip takes integers from opset 12), a mask as
  // int64, either with a fractional bound in float32: the Cast of in_as.
  r["clamp"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, clip(L, in_as(L, op, 0, dtype_of(op)), dtype_of(op), op.get_double("min"), op.get_double("max")));
  };
  r["to_dtype"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Cast", {in(L, op, 0)}, {{"to", static_cast<int64_t>(proto::element_type(dtype_of(op)))}}));
  };
}

// Comparisons, logical ops, selection by a mask, maximum and minimum.
void add_mask_rows(std::map<std::string, Row, std::less<>>& r) {
  for (const auto& [name, onnx_op] : {std::pair{"eq", "Equal"}, std::pair{"lt", "Less"}, std::pair{"le", "LessOrEqual"},
                                      std::pair{"gt", "Greater"}, std::pair{"ge", "GreaterOrEqual"}}) {
    r[name] = comparison(onnx_op);
    r[std::string(name) + "_scalar"] = scalar_comparison(onnx_op);
  }
  r["ne"] = comparison("Equal", /*negate=*/true);
  r["ne_scalar"] = scalar_comparison("Equal", /*negate=*/true);
  r["logical_and"] = logical("And", 2);
  r["logical_or"] = logical("Or", 2);
  r["logical_xor"] = logical("Xor", 2);
  r["logical_not"] = logical("Not", 1);
  r["where"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Where", {in(L, op, 0), in(L, op, 1), in(L, op, 2)}));
  };
  r["masked_fill"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Where", {in(L, op, 1), L.scalar(op.get_double("value"), dtype_of(op)), in(L, op, 0)}));
  };
  r["isclose"] = isclose;
  r["maximum"] = binary("Max");
  r["minimum"] = binary("Min");
}

// Pooling, views, joins, padding and resizing.
void add_shape_rows(std::map<std::string, Row, std::less<>>& r) {
  r["max_pool2d"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("MaxPool", {in(L, op, 0)}, pool_attributes(op)));
  };
  r["avg_pool2d"] = avg_pool;
  r["global_avg_pool2d"] = unary("GlobalAveragePool");
  r["global_max_pool2d"] = unary("GlobalMaxPool");
  r["reshape"] = reshape;
  r["permute"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Transpose", {in(L, op, 0)}, {{"perm", op.get_ints("dims")}}));
  };
  r["slice"] = slice;
  r["select"] = select;
  r["expand"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Expand", {in(L, op, 0), L.shape(L.sym_ints("shape"))}));
  };
  r["unsqueeze"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Unsqueeze", {in(L, op, 0), L.ints({op.get_int("dim")})}));
  };
  r["cat"] = cat;
  r["stack"] = stack;
  r["pad"] = pad;
  r["interpolate"] = interpolate;
}

// Reductions, gathers and scatters.
void add_reduction_rows(std::map<std::string, Row, std::less<>>& r) {
  r["sum"] = reduce;
  r["mean"] = reduce;
  r["max"] = [](Lowering& L, const trace::Op& op) { out(L, op, L.emit("ReduceMax", {in(L, op, 0)}, {{"keepdims", int64_t{0}}})); };
  r["max_dim"] = max_dim;
  r["sort"] = top_k;
  r["topk"] = top_k;
  r["cumsum"] = cumulative_sum;
  r["prod"] = product;
  r["kthvalue"] = ranked;
  r["median"] = ranked;
  r["index_select"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("Gather", {in(L, op, 0), in(L, op, 1)}, {{"axis", op.get_int("dim")}}));
  };
  r["gather"] = [](Lowering& L, const trace::Op& op) {
    out(L, op, L.emit("GatherElements", {in(L, op, 0), in(L, op, 1)}, {{"axis", op.get_int("dim")}}));
  };
  r["scatter"] = scatter;
  r["scatter_add"] = scatter;
  r["index_add"] = index_add;
  r["bincount"] = bincount;
  r["masked_select"] = masked_select;
  r["nonzero"] = nonzero;
}

// Ops with no ONNX form, refused with the reason and what to use instead.
void add_refused_rows(std::map<std::string, Row, std::less<>>& r) {
  r["dropout"] = refuse("dropout in training mode draws random masks; export in evaluation mode (module.eval())");
  r["dropout2d"] = r["dropout"];
  r["nanmedian"] = refuse("ONNX's TopK leaves NaN's place unspecified, so NaN cannot be skipped; use median");
  r["cumprod"] = refuse("ONNX has no running product; export a model without cumprod or compute it outside");
  r["max_pool2d_with_indices"] = refuse("its indices (flat h * W + w per plane) are not MaxPool's; use max_pool2d");
  for (const char* name : {"fill_", "copy_", "add_", "mul_", "div_", "remainder_", "floor_divide_"}) {
    r[name] = refuse("an in-place update has no ONNX form (ONNX values are immutable); use the out-of-place op");
  }
}

const std::map<std::string, Row, std::less<>>& rows() {
  static const std::map<std::string, Row, std::less<>> table = [] {
    std::map<std::string, Row, std::less<>> r;
    add_activation_rows(r);
    add_layer_rows(r);
    add_pointwise_rows(r);
    add_mask_rows(r);
    add_shape_rows(r);
    add_reduction_rows(r);
    add_refused_rows(r);
    return r;
  }();
  return table;
}

std::string row_names() {
  std::vector<std::string> names;
  for (const auto& [name, row] : rows()) names.push_back(name);
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

void lower_op(Lowering& lowering, const TracedOp& op, size_t index) {
  lowering.begin(op, index);
  auto it = rows().find(op.op.name);
  if (it == rows().end()) {
    lowering.fail(fmt::format("has no ONNX form in Loom's exporter (it maps {})", row_names()));
  }
  it->second(lowering, op.op);
}

}  // namespace loom::onnx
