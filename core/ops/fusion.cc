// File: core/ops/fusion.cc
// fusion::Block: the description, the one-by-one evaluation (the reference),
// and the pieces the GPU runs, with a head's backward derived from its steps.
//
// N batch, C in channels, H, W input, K the block's channels (conv: dim 1;
// linear: the last dim); rows, in, out: linear's sizes.
#include "core/ops/fusion.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <optional>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cpu/activation.h"
#include "core/error.h"
#include "core/ops/activation.h"
#include "core/ops/activation_internal.h"
#include "core/ops/conv_internal.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/fused.h"
#include "core/ops/fused_internal.h"
#include "core/ops/fusion_report.h"
#include "core/ops/linalg.h"
#include "core/ops/linalg_internal.h"
#include "core/ops/reduction.h"
#include "core/trace.h"
#include "core/cudnn/fused.h"

namespace loom::fusion {

namespace {

// The block's channel dim in a tensor of the block: the last for a linear head
// and for 1-D / 2-D tensors, else dim 1 (N, K, ...).
struct Channels {
  bool last_dim = false;

  Shape view_shape(const Tensor& y, int64_t k) const {
    if (last_dim || y.dim() <= 2) return {k};
    Shape s(static_cast<size_t>(y.dim()), 1);
    s[1] = k;
    return s;
  }
  // A (K) vector broadcast along y's channel dim.
  Tensor view(const Tensor& v, const Tensor& y) const { return v.reshape(view_shape(y, v.numel())); }
  // The (K) sum of g over everything but the channel dim.
  Tensor sum(const Tensor& g, int64_t k) const { return sum_to(g, view_shape(g, k)).reshape({k}); }
};

// y + residual, where the residual has y's shape: a residual add never broadcasts
// (nn::Residual's branch must keep the shape), so a wrong shape is an error, not a broadcast.
Tensor add_residual(const Tensor& y, const Tensor& residual) {
  LOOM_CHECK(residual.sizes() == y.sizes(), ShapeError,
             "[fusion::Block] add_residual: the residual has shape {} but the output it is added to has {}; "
             "a residual add keeps the shape (use add() for a broadcast operand)",
             shape_str(residual.sizes()), shape_str(y.sizes()));
  return add(y, residual);
}

// dx of y = f(x) for an activation row, from dy and x (no grad recorded).
Tensor activation_grad(const Tensor& dy_in, const Tensor& x, const Step& step) {
  DeviceGuard guard(dy_in.device());
  const kernel::ActivationInfo& row = kernel::activation_info(step.activation);
  const kernel::ActivationParameters parameters = activation_parameters(step.activation, step.parameters, row.name);
  Tensor saved = row.saved == kernel::Saved::Output ? activation(x, step.activation, step.parameters) : x;
  saved = saved.contiguous(saved.suggest_memory_format());
  Tensor dy = dy_in.contiguous(saved.suggest_memory_format());
  Tensor dx = empty_like(saved);
  activation_detail::backward_kernel(dx, dy, saved, step.activation, parameters);
  return dx;
}

// ---- the step table ----------------------------------------------------------------------
// One row per step kind, in StepKind's order: its name, its role in a block, its operands,
// how it applies, its derivative and its graph form. The rest of the fusion code reads
// the rows; nothing else switches on the kind.

enum class Role { Head, Norm, Pointwise };

// One op of a pointwise step's graph form (core/cudnn/fused.h's EpilogueStep): a binary op
// on the step's operand k, or the step's activation.
using cudnn::EpilogueOp;
enum class OperandShape {
  Channel,    // a (K) vector along the block's channels
  SameShape,  // y's shape exactly (a residual): never broadcast
  Any,        // per-channel or y's shape; the graph has no other broadcast
};
struct GraphPart {
  EpilogueOp op;
  int operand = 0;
  OperandShape shape = OperandShape::Any;
};

// t is the step's input; ops its operands (cast as the head casts them in an epilogue).
using ApplyFn = Tensor (*)(const Step& step, const Tensor& t, const Tensor* ops, Channels ch);
// The gradient w.r.t. t from g (w.r.t. the step's output); operand gradients go to dops.
using GradFn = Tensor (*)(const Step& step, const Tensor& t, const Tensor* ops, const Tensor& g, Tensor* dops,
                          Channels ch);

struct StepRow {
  StepKind kind;
  std::string_view name;
  Role role;
  std::vector<std::string_view> operands;  // their names; add/sub/mul: "<name>.<step index>"
  bool scalar_form = false;                // add/sub/mul: a host number instead of the operand
  ApplyFn apply = nullptr;
  GradFn grad = nullptr;             // pointwise rows
  std::vector<GraphPart> graph;      // pointwise rows: the graph ops, in order
};

const StepRow kStepRows[] = {
    {.kind = StepKind::Conv2d, .name = "conv2d", .role = Role::Head, .operands = {"weight"},
     .apply = [](const Step& s, const Tensor& t, const Tensor* o, Channels) { return conv2d(t, o[0], Tensor(), s.conv); }},
    {.kind = StepKind::Linear, .name = "linear", .role = Role::Head, .operands = {"weight"},
     .apply = [](const Step&, const Tensor& t, const Tensor* o, Channels) { return linear(t, o[0]); }},
    {.kind = StepKind::Bias, .name = "bias", .role = Role::Pointwise, .operands = {"bias"},
     .apply = [](const Step&, const Tensor& t, const Tensor* o, Channels ch) { return add(t, ch.view(o[0], t)); },
     .grad = [](const Step&, const Tensor&, const Tensor* o, const Tensor& g, Tensor* d, Channels ch) {
       d[0] = ch.sum(g, o[0].numel());
       return g;
     },
     .graph = {{EpilogueOp::Add, 0, OperandShape::Channel}}},
    {.kind = StepKind::BatchNorm, .name = "batch_norm", .role = Role::Norm,
     .operands = {"norm.weight", "norm.bias", "norm.running_mean", "norm.running_var"},
     .apply = [](const Step& s, const Tensor& t, const Tensor* o, Channels) {
       return batch_norm(t, o[2], o[3], o[0], o[1], s.norm);
     }},
    {.kind = StepKind::Activation, .name = "activation", .role = Role::Pointwise,
     .apply = [](const Step& s, const Tensor& t, const Tensor*, Channels) { return activation(t, s.activation, s.parameters); },
     .grad = [](const Step& s, const Tensor& t, const Tensor*, const Tensor& g, Tensor*, Channels) {
       return activation_grad(g, t, s);
     },
     .graph = {{EpilogueOp::Activation}}},
    {.kind = StepKind::Add, .name = "add", .role = Role::Pointwise, .operands = {"add"}, .scalar_form = true,
     .apply = [](const Step& s, const Tensor& t, const Tensor* o, Channels) { return s.scalar ? add(t, *s.scalar) : add(t, o[0]); },
     .grad = [](const Step& s, const Tensor&, const Tensor* o, const Tensor& g, Tensor* d, Channels) {
       if (!s.scalar) d[0] = sum_to(g, o[0].sizes());
       return g;
     },
     .graph = {{EpilogueOp::Add}}},
    {.kind = StepKind::Sub, .name = "sub", .role = Role::Pointwise, .operands = {"sub"}, .scalar_form = true,
     .apply = [](const Step& s, const Tensor& t, const Tensor* o, Channels) { return s.scalar ? sub(t, *s.scalar) : sub(t, o[0]); },
     .grad = [](const Step& s, const Tensor&, const Tensor* o, const Tensor& g, Tensor* d, Channels) {
       if (!s.scalar) d[0] = neg(sum_to(g, o[0].sizes()));
       return g;
     },
     .graph = {{EpilogueOp::Sub}}},
    {.kind = StepKind::Mul, .name = "mul", .role = Role::Pointwise, .operands = {"mul"}, .scalar_form = true,
     .apply = [](const Step& s, const Tensor& t, const Tensor* o, Channels) { return s.scalar ? mul(t, *s.scalar) : mul(t, o[0]); },
     .grad = [](const Step& s, const Tensor& t, const Tensor* o, const Tensor& g, Tensor* d, Channels) {
       if (s.scalar) return mul(g, *s.scalar);
       d[0] = sum_to(mul(g, t), o[0].sizes());
       return mul(g, o[0]);
     },
     .graph = {{EpilogueOp::Mul}}},
    {.kind = StepKind::ScaleBias, .name = "scale_bias", .role = Role::Pointwise, .operands = {"scale", "shift"},
     .apply = [](const Step&, const Tensor& t, const Tensor* o, Channels ch) {
       return add(mul(t, ch.view(o[0], t)), ch.view(o[1], t));
     },
     .grad = [](const Step&, const Tensor& t, const Tensor* o, const Tensor& g, Tensor* d, Channels ch) {
       d[0] = ch.sum(mul(g, t), o[0].numel());
       d[1] = ch.sum(g, o[1].numel());
       return mul(g, ch.view(o[0], g));
     },
     .graph = {{EpilogueOp::Mul, 0, OperandShape::Channel}, {EpilogueOp::Add, 1, OperandShape::Channel}}},
    {.kind = StepKind::Residual, .name = "add_residual", .role = Role::Pointwise, .operands = {"residual"},
     .apply = [](const Step&, const Tensor& t, const Tensor* o, Channels) { return add_residual(t, o[0]); },
     .grad = [](const Step&, const Tensor&, const Tensor* o, const Tensor& g, Tensor* d, Channels) {
       d[0] = sum_to(g, o[0].sizes());
       return g;
     },
     .graph = {{EpilogueOp::Add, 0, OperandShape::SameShape}}},
};
static_assert(std::size(kStepRows) == static_cast<size_t>(StepKind::Residual) + 1,
              "one row per StepKind, in its order");

const StepRow& row_of(StepKind kind) {
  const StepRow& row = kStepRows[static_cast<size_t>(kind)];
  LOOM_CHECK(row.kind == kind, Error, "[fusion] the step table is out of StepKind's order at {}", row.name);
  return row;
}

bool is_head(StepKind kind) { return row_of(kind).role == Role::Head; }
bool is_pointwise(StepKind kind) { return row_of(kind).role == Role::Pointwise; }
std::string_view kind_name(StepKind kind) { return row_of(kind).name; }

int operand_count(const Step& step) {
  const StepRow& row = row_of(step.kind);
  return row.scalar_form && step.scalar ? 0 : static_cast<int>(row.operands.size());
}

std::string step_str(const Step& step) {
  const StepRow& row = row_of(step.kind);
  if (step.kind == StepKind::Conv2d) {
    const Conv2dOptions& o = step.conv;
    std::string s = fmt::format("conv2d(stride={}, padding={}", o.stride.str(), o.padding.str());
    if (o.dilation != Size2(1)) s += fmt::format(", dilation={}", o.dilation.str());
    if (o.groups != 1) s += fmt::format(", groups={}", o.groups);
    return s + ")";
  }
  if (step.kind == StepKind::Activation) {
    const std::string_view name = kernel::activation_info(step.activation).name;
    return step.parameters.empty() ? std::string(name) : fmt::format("{}({})", name, fmt::join(step.parameters, ", "));
  }
  if (step.kind == StepKind::BatchNorm && !step.norm.training) return "batch_norm(eval)";
  if (step.scalar) return fmt::format("{} {}", row.name, *step.scalar);
  return std::string(row.name);
}

Channels channels_of(const std::vector<Step>& steps) {
  return {.last_dim = !steps.empty() && steps.front().kind == StepKind::Linear};
}

// Step i's operands: operands[offset[i] .. offset[i] + operand_count).
std::vector<size_t> operand_offsets(const std::vector<Step>& steps) {
  std::vector<size_t> offsets;
  size_t at = 0;
  for (const Step& step : steps) {
    offsets.push_back(at);
    at += static_cast<size_t>(operand_count(step));
  }
  offsets.push_back(at);
  return offsets;
}

// The end of the head's epilogue: steps [1, end) are the pointwise steps right
// after a conv2d or linear, which the fused head computes in its own dtype
// (end <= 1: no head, or nothing after it).
size_t head_epilogue_end(const std::vector<Step>& steps) {
  if (steps.empty() || !is_head(steps.front().kind)) return 0;
  size_t end = 1;
  while (end < steps.size() && is_pointwise(steps[end].kind)) ++end;
  return end;
}

// One step with the public ops (recorded by autograd when grad mode is on).
// Under autocast an epilogue step's tensor operands are cast as the fused head
// casts them, so that fused and unfused runs return the same dtype (an fp32
// bias would otherwise promote the bf16 conv output to fp32 in the unfused run
// only); later steps promote as the plain ops do, and so does batch_norm_activation.
Tensor apply_step(const Step& step, const Tensor& t, const Tensor* raw, Channels ch, bool epilogue) {
  const StepRow& row = row_of(step.kind);
  if (row.role != Role::Pointwise || !epilogue) return row.apply(step, t, raw, ch);
  std::array<Tensor, 2> ops;
  for (int i = 0; i < operand_count(step); ++i) ops[i] = autocast_operand(raw[i]);
  return row.apply(step, t, ops.data(), ch);
}

// Steps [begin, end) one by one.
Tensor apply_steps(const std::vector<Step>& steps, size_t begin, size_t end, Tensor t,
                   const std::vector<Tensor>& operands, const std::vector<size_t>& offsets) {
  const Channels ch = channels_of(steps);
  const size_t epilogue_end = head_epilogue_end(steps);
  for (size_t i = begin; i < end; ++i) {
    t = apply_step(steps[i], t, operands.data() + offsets[i], ch, i >= 1 && i < epilogue_end);
  }
  return t;
}

// ---- a head's derived backward -------------------------------------------------------

// What a head's forward keeps for its backward.
struct HeadSaved {
  std::vector<Step> steps;          // the whole block's (operand offsets index them)
  std::vector<size_t> offsets;
  size_t begin = 0, end = 0;        // the head piece: the conv / linear step, then pointwise steps
  std::vector<Tensor> operands;     // detached, as the forward used them
  std::vector<bool> need_operand;   // per operand: whether it wants a gradient
  Tensor x, w, z;                   // z = conv(x, w) or x . w^T, shaped as y
  kernel::ConvParams params;
  MemoryFormat kernel = MemoryFormat::Contiguous, output = MemoryFormat::Contiguous;
  MemoryFormat weight = MemoryFormat::Contiguous;
  Shape x_sizes;
  bool need_x = true, need_w = true;  // (a first layer's input wants no dgrad)
  std::string run_key;  // fusion_report's key of the block run, "" off the GPU
  size_t piece = 0;     // the head's piece in that run
};

bool is_conv_head(const HeadSaved& s) { return s.steps[s.begin].kind == StepKind::Conv2d; }

// dx and dw from g = dL/dz with the plain kernels: conv dgrad / wgrad, or the two matmuls.
std::array<Tensor, 2> head_kernel_grads(const HeadSaved& s, const Tensor& g) {
  Tensor dx, dw;
  if (is_conv_head(s)) {
    Tensor gk = g.contiguous(s.kernel);
    TensorOptions o = gk.options();
    o.memory_format = s.kernel;
    if (s.need_x) {
      dx = empty(s.x_sizes, o);
      conv_detail::dgrad_kernel(dx, gk, s.w, s.params);
      dx = dx.contiguous(s.output);
    }
    if (s.need_w) {
      dw = empty(s.w.sizes(), o);
      conv_detail::wgrad_kernel(dw, gk, s.x, s.params);
      dw = dw.contiguous(s.weight);
    }
  } else {
    const int64_t out = s.w.size(0), in = s.w.size(1);
    Tensor g2 = g.contiguous().reshape({-1, out});
    if (s.need_x) dx = matmul(g2, s.w).reshape(s.x_sizes);
    if (s.need_w) dw = matmul(g2.t(), s.x.reshape({-1, in}));
  }
  return {dx, dw};
}

// The last resort: replays each pointwise step's input from z with the public
// ops, then walks the steps in reverse (each row's grad), one op per step. Returns
// g = dL/dz; the operands' gradients go to dops (one per operand of the steps).
Tensor per_step_chain_grad(const HeadSaved& s, const Tensor& dy, std::vector<Tensor>& dops) {
  const Channels ch = channels_of(s.steps);
  std::vector<Tensor> inputs;  // each pointwise step's input, replayed from z
  Tensor t = s.z;
  for (size_t i = s.begin + 1; i < s.end; ++i) {
    inputs.push_back(t);
    if (i + 1 < s.end) t = apply_step(s.steps[i], t, s.operands.data() + s.offsets[i], ch, true);
  }
  dops.assign(s.offsets[s.end] - s.offsets[s.begin + 1], Tensor());
  Tensor g = dy;
  for (size_t i = s.end; i-- > s.begin + 1;) {
    const size_t local = s.offsets[i] - s.offsets[s.begin + 1];
    g = row_of(s.steps[i].kind).grad(s.steps[i], inputs[i - s.begin - 1], s.operands.data() + s.offsets[i], g,
                                     dops.data() + local, ch);
  }
  return g;
}

// The layout the head's kernels compute in.
MemoryFormat kernel_format(const HeadSaved& s) { return is_conv_head(s) ? s.kernel : MemoryFormat::Contiguous; }

// z's dtype and device, in that layout (z is set once the forward ran).
TensorOptions kernel_options(const HeadSaved& s) {
  TensorOptions o = s.z.options();
  o.requires_grad = false;
  o.memory_format = kernel_format(s);
  return o;
}

// The head's pointwise steps as graph ops (one step may give two: scale_bias is
// a mul then an add), and for each graph op the step it came from, its row's part,
// and the index in HeadSaved::operands of the tensor it reads, if any.
struct GraphSteps {
  std::vector<cudnn::EpilogueStep> ops;
  std::vector<size_t> step;
  std::vector<GraphPart> part;
  std::vector<std::optional<size_t>> operand;
};

// Step i's operand k as a graph operand, if it is per-channel or of y's shape and
// layout (the graph has no other broadcast) and of y's dtype.
std::optional<cudnn::EpilogueStep> graph_operand(const HeadSaved& s, const Tensor& y, size_t i, GraphPart part) {
  const Tensor& t = s.operands[s.offsets[i] + static_cast<size_t>(part.operand)];
  if (t.dtype() != y.dtype()) return std::nullopt;
  if (part.shape == OperandShape::SameShape && t.sizes() != y.sizes()) return std::nullopt;  // apply_step's error
  const bool linear = s.steps[s.begin].kind == StepKind::Linear;
  const int64_t channels = y.size(linear ? -1 : 1);
  const bool channel = t.numel() == channels && t.is_contiguous() &&
                       (part.shape == OperandShape::Channel ||
                        (linear ? t.size(-1) == channels : t.dim() >= 3 && t.size(-3) == channels));
  const bool full = t.sizes() == y.sizes() && t.strides() == y.strides();
  if (!channel && !full) return std::nullopt;
  cudnn::EpilogueStep e;
  e.op = part.op;
  e.operand = channel ? cudnn::EpilogueOperand::Channel : cudnn::EpilogueOperand::Full;
  e.tensor = t.strided();
  return e;
}

// One graph part of step i; nullopt where it has no graph form.
std::optional<cudnn::EpilogueStep> graph_part(const HeadSaved& s, const Tensor& y, size_t i, GraphPart part) {
  const Step& step = s.steps[i];
  if (part.op == EpilogueOp::Activation) {
    return cudnn::EpilogueStep{
        .op = EpilogueOp::Activation, .activation = step.activation,
        .parameters =
            activation_parameters(step.activation, step.parameters, kernel::activation_info(step.activation).name)};
  }
  if (step.scalar) {
    return cudnn::EpilogueStep{.op = part.op, .operand = cudnn::EpilogueOperand::Scalar,
                               .scalar = *step.scalar};
  }
  return graph_operand(s, y, i, part);
}

// The graph form of the head's steps; nullopt (with why) where one has none.
std::optional<GraphSteps> epilogue_steps(const HeadSaved& s, const Tensor& y, std::string& why) {
  DeviceGuard guard(y.device());
  GraphSteps out;
  for (size_t i = s.begin + 1; i < s.end; ++i) {
    const Step& step = s.steps[i];
    const StepRow& row = row_of(step.kind);
    for (const GraphPart& part : row.graph) {
      std::optional<cudnn::EpilogueStep> e = graph_part(s, y, i, part);
      if (!e) {
        why = fmt::format("step {} has no graph form here (an operand of another dtype, or neither "
                          "per-channel nor of the output's shape and layout)",
                          step_str(step));
        return std::nullopt;
      }
      const bool reads = e->operand == cudnn::EpilogueOperand::Channel || e->operand == cudnn::EpilogueOperand::Full;
      out.ops.push_back(*e);
      out.step.push_back(i);
      out.part.push_back(part);
      out.operand.push_back(reads ? std::optional<size_t>(s.offsets[i] + static_cast<size_t>(part.operand))
                                  : std::nullopt);
    }
  }
  return out;
}

// Graph op k's operand gradient before its reduction (cudnn::EpilogueStepGrad)
// reduced to the operand: over everything but the channel dim for a (K) operand
// (OperandShape::Channel), else to the operand's shape; negated for a sub.
Tensor reduce_operand_grad(const HeadSaved& s, const GraphSteps& gs, size_t k, const Tensor& c) {
  const Tensor& operand = s.operands[*gs.operand[k]];
  Tensor d = gs.part[k].shape == OperandShape::Channel ? channels_of(s.steps).sum(c, operand.numel())
                                                       : sum_to(c, operand.sizes());
  return gs.part[k].op == EpilogueOp::Sub ? neg(d) : d;
}

// Whether every graph op in [from, to) passes g through (an add or a sub).
bool passes_through(const GraphSteps& gs, size_t from, size_t to) {
  return std::all_of(gs.ops.begin() + static_cast<std::ptrdiff_t>(from),
                     gs.ops.begin() + static_cast<std::ptrdiff_t>(to),
                     [](const cudnn::EpilogueStep& e) { return cudnn::passes_through(e); });
}

// The derivative chain's description for fused.h, and where each operand
// gradient comes from: a buffer the graph writes, or (an add or sub with only
// adds and subs after it) dy itself, or (only adds and subs before it, when
// the graph writes g) g itself.
struct Derivative {
  cudnn::EpilogueBackwardArgs args;
  std::vector<Tensor> sources;  // per graph op: its operand gradient before the reduction
  std::vector<bool> from_g;     // per graph op: the source is g (filled in once g exists)
};

std::optional<Derivative> derivative(const HeadSaved& s, const GraphSteps& gs, const Tensor& dy,
                                     bool writes_g, std::string& why) {
  Derivative d;
  const bool conv = is_conv_head(s);
  const int64_t out = s.w.size(0);
  auto view = [&](const Tensor& t) { return conv ? t.strided() : t.reshape({-1, out}).strided(); };
  d.args.dy = view(dy);
  d.args.z = view(s.z);
  d.args.steps = gs.ops;
  why = cudnn::epilogue_derivative_why_not(d.args);  // before any buffer is made
  if (!why.empty()) return std::nullopt;
  const size_t n = gs.ops.size();
  d.sources.resize(n);
  d.from_g.assign(n, false);
  for (size_t k = 0; k < n; ++k) {
    cudnn::EpilogueStepGrad grad;
    const bool pass = passes_through(gs, k, k + 1);
    if (gs.operand[k] && s.need_operand[*gs.operand[k]]) {
      if (pass && passes_through(gs, k + 1, n)) {
        d.sources[k] = dy;
      } else if (pass && writes_g && passes_through(gs, 0, k)) {
        d.from_g[k] = true;
      } else {
        d.sources[k] = empty(s.z.sizes(), kernel_options(s));
        grad.operand_grad = view(d.sources[k]);
      }
    }
    d.args.grads.push_back(grad);
  }
  return d;
}

// The operand gradients from the sources, in the layout head_grads returns.
std::vector<Tensor> operand_grads(const HeadSaved& s, const GraphSteps& gs, const Derivative& d, const Tensor& g) {
  std::vector<Tensor> dops(s.offsets[s.end] - s.offsets[s.begin + 1]);
  for (size_t k = 0; k < gs.ops.size(); ++k) {
    if (!gs.operand[k] || !s.need_operand[*gs.operand[k]]) continue;
    dops[*gs.operand[k] - s.offsets[s.begin + 1]] = reduce_operand_grad(s, gs, k, d.from_g[k] ? g : d.sources[k]);
  }
  return dops;
}

std::string engines_str(const std::vector<int64_t>& engines) {
  return fmt::format("engine{} {}", engines.size() == 1 ? "" : "s", fmt::join(engines, ", "));
}

// The tiers above the per-step ops, in order: the chain fused into dgrad /
// wgrad (or the matmuls); the chain as one graph, then the plain kernels. The
// gradients go to grads (dx, dw, then the operands'); false, with why, when
// neither ran. `how` says which did.
bool derived_grads(const HeadSaved& s, const Tensor& dy_in, std::vector<Tensor>& grads, std::string& how,
                   std::string& why) {
  DeviceGuard guard(dy_in.device());
  std::optional<GraphSteps> gs = epilogue_steps(s, s.z, why);
  if (!gs) return false;
  const bool conv = is_conv_head(s);
  const TensorOptions o = kernel_options(s);
  const Tensor dy = (dy_in.dtype() == o.dtype ? dy_in : dy_in.to(o.dtype)).contiguous(o.memory_format);
  std::optional<Derivative> d = derivative(s, *gs, dy, /*writes_g=*/false, why);
  if (!d) return false;
  Tensor dx, dw;
  std::optional<Strided> dxs, dws;
  const int64_t in = s.w.size(1);
  if (s.need_x) {
    dx = empty(conv ? s.x_sizes : Shape{s.x.numel() / in, in}, o);
    dxs = dx.strided();
  }
  if (s.need_w) {
    dw = empty(s.w.sizes(), o);
    dws = dw.strided();
  }
  cudnn::EpilogueRun into = conv ? cudnn::conv2d_epilogue_grads(dxs, dws, s.x.strided(), s.w.strided(), s.params, d->args)
                                 : cudnn::linear_epilogue_grads(dxs, dws, s.x.reshape({-1, in}).strided(),
                                                                s.w.strided(), d->args);
  if (into.ran) {
    if (dx.defined()) dx = conv ? dx.contiguous(s.output) : dx.reshape(s.x_sizes);
    if (dw.defined() && conv) dw = dw.contiguous(s.weight);
    grads = {dx, dw};
    std::vector<Tensor> dops = operand_grads(s, *gs, *d, Tensor());
    grads.insert(grads.end(), dops.begin(), dops.end());
    how = fmt::format("derivative fused into dgrad/wgrad ({})", engines_str(into.engines));
    return true;
  }
  d = derivative(s, *gs, dy, /*writes_g=*/true, why);
  if (!d) return false;
  Tensor g = empty(s.z.sizes(), o);
  cudnn::EpilogueRun chain = cudnn::epilogue_backward(conv ? g.strided() : g.reshape({-1, s.w.size(0)}).strided(), d->args);
  if (!chain.ran) {
    why = chain.why_not;
    return false;
  }
  const std::array<Tensor, 2> kernel = head_kernel_grads(s, g);
  grads = {kernel[0], kernel[1]};
  std::vector<Tensor> dops = operand_grads(s, *gs, *d, g);
  grads.insert(grads.end(), dops.begin(), dops.end());
  how = fmt::format("derivative as one graph ({}) + dgrad/wgrad", engines_str(chain.engines));
  return true;
}

// dx, dw, then one gradient per operand of the pointwise steps. On the GPU the
// derivative chain runs as fused graphs where cuDNN has engines (derived_grads);
// else, and on the CPU, one public op per step.
std::vector<Tensor> head_grads(const HeadSaved& s, const Tensor& dy) {
  std::string why = "fusion is off (FusionGuard)";
  if (s.z.device().is_cuda() && fusion_enabled()) {
    std::vector<Tensor> grads;
    std::string how;
    if (derived_grads(s, dy, grads, how, why)) {
      if (!s.run_key.empty()) note_backward(s.run_key, s.piece, how);
      return grads;
    }
  }
  std::vector<Tensor> dops;
  const Tensor g = per_step_chain_grad(s, dy, dops);
  if (!s.run_key.empty()) note_backward(s.run_key, s.piece, "derivative unfused: " + why);
  const std::array<Tensor, 2> kernel = head_kernel_grads(s, g);
  std::vector<Tensor> grads = {kernel[0], kernel[1]};
  grads.insert(grads.end(), dops.begin(), dops.end());
  return grads;
}

// The head's inputs after autocast: x, w, then the pointwise steps' operands, whose
// detached copies (and whether each wants a gradient) go to s.
std::vector<Tensor> head_inputs(HeadSaved& s, const Tensor& x_in, const std::vector<Tensor>& operands) {
  const size_t first = s.offsets[s.begin + 1], last = s.offsets[s.end];
  std::vector<Tensor> inputs = {autocast_operand(x_in), autocast_operand(operands[s.offsets[s.begin]])};
  s.operands.assign(operands.size(), Tensor());
  s.need_operand.assign(operands.size(), false);
  for (size_t i = first; i < last; ++i) {
    inputs.push_back(autocast_operand(operands[i]));
    s.operands[i] = inputs.back().detach();
    s.need_operand[i] = inputs.back().requires_grad();
  }
  return inputs;
}

// y's sizes and options, with s.x and s.w as the head's kernels take them (and, for
// a conv, its parameters and layouts).
std::pair<Shape, TensorOptions> head_kernel_inputs(HeadSaved& s, const Tensor& x, const Tensor& w) {
  const Step& head = s.steps[s.begin];
  TensorOptions yo = x.options();
  yo.requires_grad = false;
  s.x_sizes = x.sizes();
  s.need_x = x.requires_grad();
  s.need_w = w.requires_grad();
  if (head.kind != StepKind::Conv2d) {
    linalg_detail::check_linear_args(x, w, Tensor());
    s.x = x.detach().contiguous();
    s.w = w.detach().contiguous();
    Shape y_sizes = x.sizes();
    y_sizes.back() = w.size(0);
    return {y_sizes, yo};
  }
  conv_detail::check_conv2d_args(x, w, Tensor(), head.conv);
  s.params = conv_detail::conv_params(head.conv);
  s.output = conv_detail::output_format(x, w);
  s.kernel = conv_detail::kernel_format(x, s.output);
  s.weight = w.suggest_memory_format();
  s.x = conv_detail::kernel_input(x, s.kernel);
  s.w = conv_detail::kernel_input(w, s.kernel);
  yo.memory_format = s.kernel;
  return {conv_detail::output_sizes(x, w, head.conv), yo};
}

// The head as one cuDNN graph writing y (and z, when defined); false where it did
// not run (off the GPU, fusion off, no graph form or no engine), with note saying why.
bool fused_head_forward(HeadSaved& s, const Tensor& y, const Tensor& z, PieceRun& note) {
  if (!y.device().is_cuda() || !fusion_enabled() || s.x.numel() == 0) return false;
  for (size_t i = s.offsets[s.begin + 1]; i < s.offsets[s.end]; ++i) {  // dense, as the graph reads them
    Tensor& t = s.operands[i];
    t = t.sizes() == y.sizes() ? t.contiguous(kernel_format(s)) : t.contiguous();
  }
  std::string why;
  bool fused = false;
  if (auto graph_steps = epilogue_steps(s, y, why)) {
    const int64_t in = s.w.size(1), out = s.w.size(0);
    const bool conv = is_conv_head(s);
    std::optional<Strided> zs;
    if (z.defined()) zs = conv ? z.strided() : z.reshape({-1, out}).strided();
    cudnn::EpilogueRun run =
        conv ? cudnn::conv2d_epilogue_forward(y.strided(), zs, s.x.strided(), s.w.strided(), s.params, graph_steps->ops)
             : cudnn::linear_epilogue_forward(y.reshape({-1, out}).strided(), zs, s.x.reshape({-1, in}).strided(),
                                              s.w.strided(), graph_steps->ops);
    fused = run.ran;
    note.graph = run.graph;
    why = run.why_not;
  }
  note.how = fused ? "one cuDNN graph" : "unfused";
  note.why_not = why;
  return fused;
}

// Runs the head piece [begin, end) on x; fused into one graph where cuDNN can.
// `run_key` and `piece` say where the backward notes how it ran ("" off the GPU).
Tensor run_head(const std::vector<Step>& steps, const std::vector<size_t>& offsets, size_t begin,
                size_t end, const Tensor& x_in, const std::vector<Tensor>& operands, PieceRun& note,
                const std::string& run_key, size_t piece) {
  DeviceGuard guard(x_in.device());
  HeadSaved s{.steps = steps, .offsets = offsets, .begin = begin, .end = end};
  s.run_key = run_key;
  s.piece = piece;
  const std::vector<Tensor> inputs = head_inputs(s, x_in, operands);
  const bool grad = grad_mode_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) {
                      return t.defined() && t.requires_grad();
                    });
  const auto [y_sizes, yo] = head_kernel_inputs(s, inputs[0], inputs[1]);
  // A lone conv or linear has nothing to fuse: its z is its y, one buffer.
  const bool lone = end == begin + 1;
  Tensor y = lone ? Tensor() : empty(y_sizes, yo);
  Tensor z = grad ? empty(y_sizes, yo) : Tensor();
  if (lone || !fused_head_forward(s, y, z, note)) {
    NoGradGuard no_grad;
    if (is_conv_head(s)) {
      if (!z.defined()) z = empty(y_sizes, yo);
      conv_detail::forward_kernel(z, s.x, s.w, Tensor(), s.params);
    } else {
      z = linear(s.x, s.w);
    }
    y = apply_steps(steps, begin + 1, end, z, s.operands, offsets);
  }
  s.z = z;
  if (is_conv_head(s)) y = y.contiguous(s.output);
  if (!grad) return y;
  std::vector<Tensor> saved = {s.x, s.w, z};
  record(fmt::format("fusion.{}", kind_name(steps[begin].kind)), inputs, y,
         [s](const Tensor& dy) { return head_grads(s, dy); }, saved);
  return y;
}

// ---- pieces ------------------------------------------------------------------------------

enum class PieceKind { Head, NormActivation, Ops };

struct Piece {
  PieceKind kind;
  size_t begin, end;  // steps [begin, end)
};

bool is_plain_relu(const Step& step) {
  return step.kind == StepKind::Activation && step.activation == ActivationKind::Relu;
}

std::vector<Piece> plan_pieces(const std::vector<Step>& steps) {
  std::vector<Piece> pieces;
  size_t i = 0;
  while (i < steps.size()) {
    size_t j = i + 1;
    if (is_head(steps[i].kind)) {
      while (j < steps.size() && is_pointwise(steps[j].kind)) ++j;
      pieces.push_back({PieceKind::Head, i, j});
    } else if (steps[i].kind == StepKind::BatchNorm) {
      // The fused batch-norm graph computes act(bn(x) + r): a residual add between
      // the norm and the activation joins it; one after the activation (nn::Residual's
      // order, bn -> relu -> add_residual) starts the next piece, so the order stays the block's.
      if (j < steps.size() && steps[j].kind == StepKind::Residual) ++j;
      if (j < steps.size() && steps[j].kind == StepKind::Activation && steps[i].norm.training) {
        pieces.push_back({PieceKind::NormActivation, i, j + 1});
        j = j + 1;
      } else {
        pieces.push_back({PieceKind::Ops, i, i + 1});
        j = i + 1;
      }
    } else {
      while (j < steps.size() && is_pointwise(steps[j].kind)) ++j;
      pieces.push_back({PieceKind::Ops, i, j});
    }
    i = j;
  }
  return pieces;
}

// On the GPU, [conv2d, bias] followed by [batch_norm (training), ...relu]: the norm
// subtracts the batch mean, which takes a per-channel bias out again, so the conv
// runs without it and the norm piece absorbs it (core/ops/fused_internal.h). The
// CPU keeps the one-by-one run's bias add, so that its pieces stay bit-identical.
bool bias_absorbed_by_norm(const std::vector<Step>& steps, const std::vector<Piece>& pieces, size_t k,
                           const Tensor& x) {
  if (!x.device().is_cuda() || k + 1 >= pieces.size()) return false;
  const Piece& p = pieces[k];
  return p.kind == PieceKind::Head && steps[p.begin].kind == StepKind::Conv2d && p.end - p.begin == 2 &&
         steps[p.begin + 1].kind == StepKind::Bias && pieces[k + 1].kind == PieceKind::NormActivation;
}

// The head [conv2d | linear, (bias), relu] is a fused op of its own.
bool is_fused_op(const std::vector<Step>& steps, const Piece& p) {
  const size_t n = p.end - p.begin;
  if (n < 2 || n > 3 || !is_plain_relu(steps[p.end - 1])) return false;
  return n == 2 || steps[p.begin + 1].kind == StepKind::Bias;
}

// The head [conv2d | linear, (bias)]: the plain op.
bool is_plain_layer(const std::vector<Step>& steps, const Piece& p) {
  const size_t n = p.end - p.begin;
  return n == 1 || (n == 2 && steps[p.begin + 1].kind == StepKind::Bias);
}

// Why a piece of separate ops did not fuse; `previous` is the piece before it (or null).
std::string_view ops_why_not(const std::vector<Step>& steps, const Piece& p, const Piece* previous) {
  const Step& first = steps[p.begin];
  if (first.kind == StepKind::BatchNorm) {
    return first.norm.training
               ? "a batch norm fuses only with an activation after it (and a residual add between)"
               : "a batch norm in eval mode runs as the plain op (the fused batch-norm graph is for training)";
  }
  if (first.kind == StepKind::Residual && previous != nullptr && previous->kind == PieceKind::NormActivation) {
    return "the residual add comes after the activation, and the fused batch-norm graph adds a residual only "
           "before its activation (act(bn(x) + r)): it runs as a separate add after the fused piece";
  }
  return "pointwise steps without a conv or linear before them run as separate ops";
}

std::string piece_str(const std::vector<Step>& steps, const Piece& p) {
  std::string s = "[";
  for (size_t i = p.begin; i < p.end; ++i) s += (i > p.begin ? " -> " : "") + step_str(steps[i]);
  return s + "]";
}

}  // namespace

// ---- declaring ---------------------------------------------------------------------------

Block& Block::push(Step step) {
  LOOM_CHECK(!is_head(step.kind) || steps_.empty(), ValueError,
             "[fusion::Block] {} must be the block's first step; the block so far is {}",
             kind_name(step.kind), str());
  steps_.push_back(step);
  return *this;
}

Block& Block::conv2d(Conv2dOptions options) { return push({.kind = StepKind::Conv2d, .conv = options}); }
Block& Block::linear() { return push({.kind = StepKind::Linear}); }
Block& Block::bias() { return push({.kind = StepKind::Bias}); }
Block& Block::batch_norm(BatchNormOptions options) {
  return push({.kind = StepKind::BatchNorm, .norm = options});
}
Block& Block::activation(ActivationKind kind, std::vector<double> parameters) {
  activation_parameters(kind, parameters, fmt::format("fusion::Block {}", kernel::activation_info(kind).name));
  return push({.kind = StepKind::Activation, .activation = kind, .parameters = std::move(parameters)});
}
Block& Block::add() { return push({.kind = StepKind::Add}); }
Block& Block::sub() { return push({.kind = StepKind::Sub}); }
Block& Block::mul() { return push({.kind = StepKind::Mul}); }
Block& Block::add(double value) { return push({.kind = StepKind::Add, .scalar = value}); }
Block& Block::sub(double value) { return push({.kind = StepKind::Sub, .scalar = value}); }
Block& Block::mul(double value) { return push({.kind = StepKind::Mul, .scalar = value}); }
Block& Block::scale_bias() { return push({.kind = StepKind::ScaleBias}); }
Block& Block::add_residual() { return push({.kind = StepKind::Residual}); }

std::vector<std::string> Block::operand_names() const {
  std::vector<std::string> names;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const StepRow& row = row_of(steps_[i].kind);
    if (row.scalar_form) {
      if (!steps_[i].scalar) names.push_back(fmt::format("{}.{}", row.name, i));
      continue;
    }
    names.insert(names.end(), row.operands.begin(), row.operands.end());
  }
  return names;
}

std::string Block::str() const {
  std::string s;
  for (const Step& step : steps_) s += (s.empty() ? "" : " -> ") + step_str(step);
  return s.empty() ? "(empty block)" : s;
}

std::string Block::pieces_str() const {
  std::string s;
  for (const Piece& p : plan_pieces(steps_)) s += (s.empty() ? "" : " ") + piece_str(steps_, p);
  return s;
}

// ---- running -----------------------------------------------------------------------------

namespace {

void check_operands(const Block& block, const Tensor& x, const std::vector<Tensor>& operands) {
  const std::vector<std::string> names = block.operand_names();
  LOOM_CHECK(!block.steps().empty(), ValueError,
             "[fusion::Block] the block has no steps; declare some, e.g. Block().conv2d().relu()");
  LOOM_CHECK(operands.size() == names.size(), ValueError,
             "[fusion::Block] {} takes {} operands ({}) but got {}", block.str(), names.size(),
             fmt::join(names, ", "), operands.size());
  LOOM_CHECK(x.defined(), ValueError, "[fusion::Block] the input x is undefined");
  const std::vector<size_t> offsets = operand_offsets(block.steps());
  for (size_t i = 0; i < block.steps().size(); ++i) {
    if (row_of(block.steps()[i].kind).role == Role::Norm) continue;  // batch_norm checks its own
    for (size_t k = offsets[i]; k < offsets[i + 1]; ++k) {
      LOOM_CHECK(operands[k].defined(), ValueError,
                 "[fusion::Block] operand {} ('{}') of {} is undefined", k, names[k], block.str());
    }
  }
}

}  // namespace

Tensor Block::operator()(const Tensor& x, const std::vector<Tensor>& operands) const {
  trace::FusedRegion fused;  // fusion by tracing leaves its ops alone (core/trace.h)
  // The CPU runs the pieces too: its fused ops (conv2d_bias_relu, batch_norm_activation) save the
  // separate bias add, its broadcast-reduce backward and the ReLU passes of the one-by-one run.
  if (x.defined() && fusion_enabled()) return forward_pieces(x, operands);
  check_operands(*this, x, operands);
  return forward_unfused(x, operands);
}

Tensor Block::forward_unfused(const Tensor& x, const std::vector<Tensor>& operands) const {
  check_operands(*this, x, operands);
  return apply_steps(steps_, 0, steps_.size(), x, operands, operand_offsets(steps_));
}

Tensor Block::forward_pieces(const Tensor& x, const std::vector<Tensor>& operands) const {
  check_operands(*this, x, operands);
  const std::vector<size_t> offsets = operand_offsets(steps_);
  std::vector<PieceRun> notes;
  const std::string key = x.device().is_cuda() ? run_key(*this, x) : "";
  Tensor y = x;
  Tensor absorbed_bias;  // a conv's bias that the next piece's batch norm takes in
  const std::vector<Piece> pieces = plan_pieces(steps_);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    PieceRun note;
    note.piece = piece_str(steps_, p);
    note.how = "unfused";
    const Tensor* ops = operands.data() + offsets[p.begin];
    const bool conv = steps_[p.begin].kind == StepKind::Conv2d;
    if (p.kind == PieceKind::Head && bias_absorbed_by_norm(steps_, pieces, k, y)) {
      absorbed_bias = ops[1];
      y = loom::conv2d(y, ops[0], Tensor(), steps_[p.begin].conv);
      note.how = "conv2d without its bias, which the batch norm after it absorbs";
    } else if (p.kind == PieceKind::Head && is_plain_layer(steps_, p)) {  // nothing to fuse: the layer's own op
      const Tensor b = p.end - p.begin == 2 ? ops[1] : Tensor();
      y = conv ? loom::conv2d(y, ops[0], b, steps_[p.begin].conv) : loom::linear(y, ops[0], b);
      note.why_not = "a conv or linear with at most a bias is the plain op (it adds its bias itself)";
    } else if (p.kind == PieceKind::Head && is_fused_op(steps_, p)) {
      const bool bias = p.end - p.begin == 3;
      const Tensor b = bias ? ops[1] : Tensor();
      y = conv ? conv2d_bias_relu(y, ops[0], b, steps_[p.begin].conv) : linear_relu(y, ops[0], b);
      note.how = conv ? "fused op conv2d_bias_relu" : "fused op linear_relu";
    } else if (p.kind == PieceKind::Head) {
      y = run_head(steps_, offsets, p.begin, p.end, y, operands, note, key, k);
    } else if (p.kind == PieceKind::NormActivation) {
      const bool residual = p.end - p.begin == 3;
      const Tensor r = residual ? ops[4] : Tensor();
      const Step& act = steps_[p.end - 1];
      const std::string how = fmt::format("fused op batch_norm_activation ({})",
                                          kernel::activation_info(act.activation).name);
      if (absorbed_bias.defined()) {
        y = fused_detail::batch_norm_activation_absorbing_bias(y, absorbed_bias, ops[2], ops[3], ops[0], ops[1],
                                                               steps_[p.begin].norm, act.activation, act.parameters,
                                                               r);
        note.how = how + ", absorbing the conv's bias";
        absorbed_bias = Tensor();
      } else {
        y = batch_norm_activation(y, ops[2], ops[3], ops[0], ops[1], steps_[p.begin].norm, act.activation,
                                  act.parameters, r);
        note.how = how;
      }
    } else {
      y = apply_steps(steps_, p.begin, p.end, y, operands, offsets);
      note.why_not = ops_why_not(steps_, p, k > 0 ? &pieces[k - 1] : nullptr);
    }
    notes.push_back(std::move(note));
  }
  if (x.device().is_cuda()) note_block_run(*this, x, operands, std::move(notes));
  return y;
}

}  // namespace loom::fusion
