// File: core/cudnn/fused.cc
// The fused graphs of fused.h, each described with the graph builder and run
// through run_plan. A graph without an engine is cached as unsupported and the
// call returns false (the op then runs the unfused kernels).
//
// N batch, C channels, H, W input, K out channels, P, Q output; M rows, In, Out features.
#include "core/cudnn/fused.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

#include "core/cudnn/context.h"
#include "core/cudnn/conv.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/pointwise.h"
#include "core/cudnn/tensor_spec.h"
#include "core/cudnn/variant_walk.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

struct RunCounters {
  std::atomic<int64_t> conv_bias_relu{0}, bn_activation_forward{0}, bn_activation_backward{0}, dgrad_relu{0},
      matmul_bias_relu{0}, epilogue{0}, epilogue_backward{0}, epilogue_grads{0},
      epilogue_grads_skipped{0};
};

RunCounters& counters() {
  static RunCounters c;
  return c;
}

// What runs a pattern no variant has an engine for.
constexpr std::string_view kUnfused = "the unfused ops (core/ops/fused.cc)";
// Why a graph with an under-aligned tensor ran on the tier below (fully_aligned, tensor_spec.h).
constexpr std::string_view kUnderAligned = "a tensor's pointer is less than 16-byte aligned";

// Runs the graph when it has a plan, counting the run. Intermediates are
// virtual, so plans need no buffers beyond the workspace. `fallback_tier` is
// empty for a variant whose failure only means the next variant is tried.
// Under-aligned tensors go to the tier below (run_plan, plan_cache.h).
bool run(const Graph& graph, const VariantPointers& pointers, std::atomic<int64_t>& runs,
         std::string_view fallback_tier = kUnfused) {
  if (!run_plan(graph, pointers, fallback_tier)) return false;
  ++runs;
  return true;
}

// Runtime-fused engines compute intermediates in fp32 and take fp32, fp16 or
// bf16 tensors; there are none for fp64. Empty tensors have nothing to fuse.
bool fusable(const Strided& t) { return t.dtype != DType::Float64 && t.numel() > 0; }

// A (K) vector of its own dtype as (1, K, 1, 1), broadcast over N, P, Q.
TensorSpec bias_spec(const Strided& b, int64_t uid) {
  TensorSpec s = channel_spec(b.sizes[0], uid, b.data);
  s.dtype = cudnn_dtype(b.dtype);
  return s;
}

// Per-channel fp32 tensors, added to the graph and listed in the variant pack alike.
void add_channels(Graph& g, int64_t channels, const VariantPointers& tensors) {
  for (const auto& [uid, ptr] : tensors) g.add_tensor(channel_spec(channels, uid, ptr));
}

}  // namespace

// ---- conv + bias + ReLU -----------------------------------------------------------
// x, w -> conv -> (+ b) -> relu -> y; the conv and sum outputs are virtual.

namespace {
enum ConvUid : int64_t { kConvX = 1, kConvW, kConvY, kConvB, kConvOut, kConvBiased };
}  // namespace

bool conv2d_bias_relu_forward(const Strided& y, const Strided& x, const Strided& w,
                              const std::optional<Strided>& b, const kernel::ConvParams& p) {
  if (!fusable(x)) return false;
  TensorSpec xs = spec_of(x, kConvX), ws = spec_of(w, kConvW), ys = spec_of(y, kConvY);
  std::optional<TensorSpec> bs;
  if (b) bs = bias_spec(*b, kConvB);
  Graph g;
  for (const TensorSpec& s : {xs, ws, ys, virtual_like(ys, kConvOut)}) g.add_tensor(s);
  g.conv(ConvDirection::Forward, kConvX, kConvW, kConvOut, p, CUDNN_DATA_FLOAT);
  int64_t pre_relu = kConvOut;
  if (bs) {
    g.add_tensor(*bs);
    g.add_tensor(virtual_like(ys, kConvBiased));
    g.pointwise(CUDNN_POINTWISE_ADD, kConvOut, kConvB, kConvBiased);
    pre_relu = kConvBiased;
  }
  g.pointwise(CUDNN_POINTWISE_RELU_FWD, pre_relu, std::nullopt, kConvY);
  VariantPointers pointers = {{kConvX, x.data}, {kConvW, w.data}, {kConvY, y.data}};
  if (b) pointers.push_back({kConvB, b->data});
  return run(g, pointers, counters().conv_bias_relu);
}

// ---- batch norm + (residual) + activation, forward and backward -------------------------

namespace {

enum BnUid : int64_t {
  kBnX = 1, kBnY, kBnZ, kScale, kBias, kEpsilon, kMomentum, kInMean, kInVar, kMean, kInvVar,
  kOutMean, kOutVar, kBnOut, kPreAct, kBnDy, kBnDx, kDScale, kDBias, kDPre,
  kCentered, kNormalized, kScaled, kBnDyAddend, kBnDySum,
};

// An intermediate of `like`'s own dtype: cuDNN's norm fusions keep the dReLU
// (dAct) output in the I/O dtype (cudnn-frontend's batch-norm samples do).
TensorSpec virtual_as(const TensorSpec& like, int64_t uid) {
  TensorSpec v = like;
  v.uid = uid;
  v.is_virtual = true;
  return v;
}

// Whether cuDNN sees x as channels-last (channel stride 1 in its spec), the
// only layout conv2d_epilogue_grads fuses into dgrad / wgrad.
bool nhwc(const Strided& x) { return spec_of(x, kBnX).strides[1] == 1; }

VariantPointers forward_channels(const BatchNormTrainingArgs& a) {
  // The running statistics are read and written in place, as in norm.cc.
  return {{kScale, a.weight.data},          {kBias, a.bias.data},
          {kInMean, a.running_mean.data},  {kInVar, a.running_var.data},
          {kOutMean, a.running_mean.data}, {kOutVar, a.running_var.data},
          {kMean, a.save_mean.data},       {kInvVar, a.save_invstd.data}};
}

// pre (virtual) + z -> kPreAct when there is a residual; the activation's input uid.
int64_t add_residual(Graph& g, const TensorSpec& like, int64_t pre,
                     const std::optional<Strided>& residual) {
  if (!residual) return pre;
  g.add_tensor(spec_of(*residual, kBnZ));
  g.add_tensor(virtual_like(like, kPreAct));
  g.pointwise(CUDNN_POINTWISE_ADD, pre, kBnZ, kPreAct);
  return kPreAct;
}

// x -> NORM_FORWARD (training) -> bn (virtual) -> (+ z) -> act -> y
Graph bn_activation_forward_graph(const BatchNormTrainingArgs& a, const PointwiseMode& mode,
                                  const std::optional<Strided>& residual) {
  TensorSpec ys = spec_of(a.y, kBnY);
  Graph g;
  g.add_tensor(spec_of(a.x, kBnX));
  g.add_tensor(ys);
  add_channels(g, a.x.sizes[1], forward_channels(a));
  g.add_tensor(scalar_spec(kEpsilon, 1e-5));
  g.add_tensor(scalar_spec(kMomentum, 0.1));
  g.add_tensor(virtual_like(ys, kBnOut));
  g.norm(CUDNN_BATCH_NORM, Graph::NormPhase::Train, {
      .x = kBnX, .scale = kScale, .bias = kBias, .epsilon = kEpsilon, .momentum = kMomentum,
      .in_running_mean = kInMean, .in_running_var = kInVar, .y = kBnOut, .mean = kMean,
      .inv_variance = kInvVar, .out_running_mean = kOutMean, .out_running_var = kOutVar});
  const int64_t pre_act = add_residual(g, ys, kBnOut, residual);
  g.pointwise(mode.mode, pre_act, std::nullopt, kBnY, mode.scalars);
  return g;
}

}  // namespace

bool batch_norm_activation_forward_training(const BatchNormTrainingArgs& a, const NormActivation& activation,
                                            const std::optional<Strided>& residual) {
  if (!fusable(a.x) || a.x.sizes.size() != 4) return false;
  const std::optional<PointwiseMode> mode = activation_mode(activation.kind, /*backward=*/false,
                                                            activation.parameters);
  if (!mode) return false;
  VariantWalk walk;
  BatchNormScalars scalars(a);
  VariantPointers pointers = forward_channels(a);
  pointers.insert(pointers.end(), {{kBnX, a.x.data}, {kBnY, a.y.data},
                                   {kEpsilon, &scalars.eps}, {kMomentum, &scalars.momentum}});
  if (residual) pointers.push_back({kBnZ, residual->data});
  return run(bn_activation_forward_graph(a, *mode, residual), pointers, counters().bn_activation_forward);
}

namespace {

// Where the backward's dAct reads the pre-activation value (or, for ReLU, its sign), in the order tried.
enum class ActSource {
  NormInference,       // NORM_FORWARD inference recomputes bn(x) (+ z) into a virtual tensor
  PointwiseRecompute,  // the same recompute written as SUB, MUL, MUL, ADD
  SavedOutput,         // the forward's output y, a non-virtual input (rows that save their output)
};

bool recomputes(ActSource s) { return s == ActSource::NormInference || s == ActSource::PointwiseRecompute; }

// cuDNN's *_BWD modes read the saved tensor as X (core/kernel/activation.h):
// the recomputed pre-activation serves a row that saves its input, and ReLU
// (its output has the input's sign); the saved y serves a row that saves its output.
bool source_serves(ActSource s, kernel::ActivationKind kind) {
  const bool saves_output = kernel::activation_info(kind).saved == kernel::Saved::Output;
  return recomputes(s) ? !saves_output || kind == kernel::ActivationKind::Relu : saves_output;
}

VariantPointers backward_channels(const BatchNormActivationBackwardArgs& a, ActSource source) {
  VariantPointers channels = {{kScale, a.weight.data},      {kMean, a.save_mean.data},
                              {kInvVar, a.save_invstd.data}, {kDScale, a.dweight.data},
                              {kDBias, a.dbias.data}};
  if (recomputes(source)) channels.push_back({kBias, a.bias.data});
  return channels;
}

// bn(x) (+ z) into fp32 virtual tensors; returns the pre-activation uid.
int64_t recompute_pre_activation(Graph& g, const TensorSpec& like, ActSource source,
                                 const std::optional<Strided>& residual) {
  g.add_tensor(virtual_like(like, kBnOut));
  if (source == ActSource::NormInference) {
    g.norm(CUDNN_BATCH_NORM, Graph::NormPhase::Eval, {.x = kBnX, .scale = kScale, .bias = kBias,
                                                      .y = kBnOut, .mean = kMean, .inv_variance = kInvVar});
  } else {
    for (int64_t uid : {kCentered, kNormalized, kScaled}) g.add_tensor(virtual_like(like, uid));
    g.pointwise(CUDNN_POINTWISE_SUB, kBnX, kMean, kCentered);
    g.pointwise(CUDNN_POINTWISE_MUL, kCentered, kInvVar, kNormalized);
    g.pointwise(CUDNN_POINTWISE_MUL, kNormalized, kScale, kScaled);
    g.pointwise(CUDNN_POINTWISE_ADD, kScaled, kBias, kBnOut);
  }
  return add_residual(g, like, kBnOut, residual);
}

// [dy + dy_addend -> (virtual) ->] dAct (the row's *_BWD mode with dy and the pre-activation value or y) -> dpre
// (virtual in x's dtype, or the output dz when there is a residual) ->
// NORM_BACKWARD -> dx, dscale, dbias
Graph bn_activation_backward_graph(const BatchNormActivationBackwardArgs& a, const PointwiseMode& mode,
                                   ActSource source) {
  TensorSpec xs = spec_of(a.x, kBnX);
  Graph g;
  g.add_tensor(xs);
  g.add_tensor(spec_of(a.dy, kBnDy));
  g.add_tensor(spec_of(a.dx, kBnDx));
  add_channels(g, a.x.sizes[1], backward_channels(a, source));
  g.add_tensor(a.dresidual ? spec_of(*a.dresidual, kDPre) : virtual_as(xs, kDPre));
  int64_t saved = kBnY;
  if (recomputes(source)) {
    saved = recompute_pre_activation(g, xs, source, a.residual);
  } else {
    g.add_tensor(spec_of(a.y, kBnY));
  }
  int64_t dy = kBnDy;
  if (a.dy_addend) {
    g.add_tensor(spec_of(*a.dy_addend, kBnDyAddend));
    g.add_tensor(virtual_like(xs, kBnDySum));
    g.pointwise(CUDNN_POINTWISE_ADD, kBnDy, kBnDyAddend, kBnDySum);
    dy = kBnDySum;
  }
  g.pointwise_backward(mode.mode, dy, saved, kDPre, mode.scalars);
  g.norm(CUDNN_BATCH_NORM, Graph::NormPhase::Backward, {.x = kBnX, .scale = kScale, .mean = kMean,
      .inv_variance = kInvVar, .dy = kDPre, .dx = kBnDx, .dscale = kDScale, .dbias = kDBias});
  return g;
}

VariantPointers backward_pointers(const BatchNormActivationBackwardArgs& a, ActSource source) {
  VariantPointers pointers = backward_channels(a, source);
  pointers.insert(pointers.end(), {{kBnX, a.x.data}, {kBnDy, a.dy.data}, {kBnDx, a.dx.data}});
  if (recomputes(source) && a.residual) pointers.push_back({kBnZ, a.residual->data});
  if (source == ActSource::SavedOutput) pointers.push_back({kBnY, a.y.data});
  if (a.dresidual) pointers.push_back({kDPre, a.dresidual->data});
  if (a.dy_addend) pointers.push_back({kBnDyAddend, a.dy_addend->data});
  return pointers;
}

}  // namespace

bool batch_norm_activation_backward(const BatchNormActivationBackwardArgs& a) {
  if (!fusable(a.x) || a.x.sizes.size() != 4) return false;
  const NormActivation& act = a.activation;
  const std::optional<PointwiseMode> mode = activation_mode(act.kind, /*backward=*/true, act.parameters);
  if (!mode) return false;
  const bool residual_dropped = a.dresidual && !a.residual;  // bn(x) + z cannot be recomputed
  std::vector<ActSource> sources;
  for (ActSource s : {ActSource::NormInference, ActSource::PointwiseRecompute, ActSource::SavedOutput}) {
    if (source_serves(s, act.kind) && !(residual_dropped && recomputes(s))) sources.push_back(s);
  }
  VariantWalk walk;
  for (ActSource source : sources) {
    const std::string_view tier = source == sources.back() ? kUnfused : "";
    if (run(bn_activation_backward_graph(a, *mode, source), backward_pointers(a, source),
            counters().bn_activation_backward, tier)) {
      return true;
    }
  }
  return false;
}

// ---- conv dgrad + dReLU -----------------------------------------------------------------
// dy, w -> dgrad -> dpre (virtual) -> RELU_BWD with r -> dx

namespace {
enum DgradUid : int64_t { kDgDy = 1, kDgW, kDgDx, kDgR, kDgPre };
}  // namespace

bool conv2d_dgrad_relu(const Strided& dx, const Strided& dy, const Strided& w, const Strided& r,
                       const kernel::ConvParams& p) {
  if (!fusable(dx)) return false;
  TensorSpec dxs = spec_of(dx, kDgDx), dys = spec_of(dy, kDgDy), ws = spec_of(w, kDgW);
  TensorSpec rs = spec_of(r, kDgR);
  Graph g;
  for (const TensorSpec& s : {dxs, dys, ws, rs, virtual_like(dxs, kDgPre)}) g.add_tensor(s);
  g.conv(ConvDirection::BackwardData, kDgPre, kDgW, kDgDy, p, CUDNN_DATA_FLOAT);
  g.pointwise_backward(CUDNN_POINTWISE_RELU_BWD, kDgPre, kDgR, kDgDx);
  return run(g, {{kDgDx, dx.data}, {kDgDy, dy.data}, {kDgW, w.data}, {kDgR, r.data}},
             counters().dgrad_relu);
}

// ---- matmul + bias + ReLU ---------------------------------------------------------------
// The 2-D operands as 3-D (1, rows, cols) matrices: x (1, M, In) . w^T (1, In, Out)
// -> (virtual) + b (1, 1, Out) -> (virtual) -> relu -> y (1, M, Out).

namespace {

enum MatmulUid : int64_t { kMmX = 1, kMmW, kMmB, kMmY, kMmProduct, kMmBiased };

TensorSpec matrix_spec(const Strided& t, int64_t uid, int64_t rows, int64_t cols,
                       int64_t row_stride, int64_t col_stride) {
  return {.uid = uid,
          .dims = {1, rows, cols},
          .strides = {rows * cols, row_stride, col_stride},
          .dtype = cudnn_dtype(t.dtype),
          .alignment = pointer_alignment(t.data)};
}

}  // namespace

bool linear_bias_relu_forward(const Strided& y, const Strided& x, const Strided& w,
                              const Strided& b) {
  if (!fusable(x)) return false;
  const int64_t m = x.sizes[0], in = x.sizes[1], out = w.sizes[0];
  TensorSpec xs = matrix_spec(x, kMmX, m, in, in, 1);
  TensorSpec ws = matrix_spec(w, kMmW, in, out, 1, in);  // w (Out, In) row-major, read as w^T
  TensorSpec bs = matrix_spec(b, kMmB, 1, out, out, 1);
  TensorSpec ys = matrix_spec(y, kMmY, m, out, out, 1);
  Graph g;
  for (const TensorSpec& s : {xs, ws, bs, ys, virtual_like(ys, kMmProduct), virtual_like(ys, kMmBiased)}) {
    g.add_tensor(s);
  }
  g.matmul(kMmX, kMmW, kMmProduct, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_ADD, kMmProduct, kMmB, kMmBiased);
  g.pointwise(CUDNN_POINTWISE_RELU_FWD, kMmBiased, std::nullopt, kMmY);
  return run(g, {{kMmX, x.data}, {kMmW, w.data}, {kMmB, b.data}, {kMmY, y.data}},
             counters().matmul_bias_relu);
}

// ---- a user block's head + epilogue ------------------------------------------------------
// x, w -> conv / matmul -> z (virtual, or an output) -> step 0 -> ... -> step n-1 -> y;
// every step's output but the last is a virtual fp32 tensor.

namespace {

enum EpilogueUid : int64_t { kEpX = 1, kEpW, kEpY, kEpZ, kEpFirstStep = 16 };

// The uids of step i's output and operand.
int64_t step_output(size_t i) { return kEpFirstStep + 2 * static_cast<int64_t>(i); }
int64_t step_operand(size_t i) { return step_output(i) + 1; }

// How one head lays out an operand (conv: 4-D; matmul: 3-D matrices).
using OperandSpec = TensorSpec (*)(const EpilogueStep& step, const TensorSpec& y, int64_t uid);

TensorSpec conv_operand_spec(const EpilogueStep& step, const TensorSpec&, int64_t uid) {
  if (step.operand == EpilogueOperand::Channel) {  // (K) or (1, K, 1, 1): read as (1, K, 1, 1)
    TensorSpec s = channel_spec(step.tensor.numel(), uid, step.tensor.data);
    s.dtype = cudnn_dtype(step.tensor.dtype);
    return s;
  }
  return spec_of(step.tensor, uid);
}

TensorSpec matrix_operand_spec(const EpilogueStep& step, const TensorSpec& y, int64_t uid) {
  const Strided& t = step.tensor;
  const int64_t rows = step.operand == EpilogueOperand::Channel ? 1 : y.dims[1], cols = y.dims[2];
  return matrix_spec(t, uid, rows, cols, cols, 1);
}

// A by-value fp32 scalar of the head's rank.
TensorSpec epilogue_scalar_spec(int64_t uid, double value, size_t rank) {
  TensorSpec s = scalar_spec(uid, value);
  s.dims.assign(rank, 1);
  s.strides.assign(rank, 1);
  return s;
}

// The step as a cuDNN pointwise mode: its forward mode, or (backward) an
// activation's *_BWD mode; none where the activation row has no such mode.
std::optional<PointwiseMode> mode_of(const EpilogueStep& step, bool backward = false) {
  if (step.op == EpilogueOp::Activation) return activation_mode(step.activation, backward, step.parameters);
  if (backward) return std::nullopt;
  const cudnnPointwiseMode_t mode = step.op == EpilogueOp::Mul   ? CUDNN_POINTWISE_MUL
                                    : step.op == EpilogueOp::Sub ? CUDNN_POINTWISE_SUB
                                                                 : CUDNN_POINTWISE_ADD;
  return PointwiseMode{.mode = mode, .scalars = {}};
}

// Whether an activation step's derivative reads the step's output (its row saves y).
bool reads_output(const EpilogueStep& step) {
  return kernel::activation_info(step.activation).saved == kernel::Saved::Output;
}

// "" when every step has a forward mode, else which step has none.
std::string steps_why_not(const std::vector<EpilogueStep>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!mode_of(steps[i])) {
      return fmt::format("step {} ({}) has no cuDNN pointwise mode with these parameters", i,
                         kernel::activation_info(steps[i].activation).name);
    }
  }
  return "";
}

// Appends the steps after `head` (the conv / matmul output); the last writes kEpY.
// `scalars` must not reallocate while the pointers are in use (reserved by the caller).
void add_epilogue(Graph& g, const TensorSpec& ys, const std::vector<EpilogueStep>& steps,
                  OperandSpec operand_spec, std::vector<float>& scalars, VariantPointers& pointers) {
  int64_t input = kEpZ;
  for (size_t i = 0; i < steps.size(); ++i) {
    const EpilogueStep& step = steps[i];
    const bool last = i + 1 == steps.size();
    const int64_t output = last ? kEpY : step_output(i);
    if (!last) g.add_tensor(virtual_like(ys, output));
    std::optional<int64_t> operand;
    if (step.operand == EpilogueOperand::Scalar) {
      scalars.push_back(static_cast<float>(step.scalar));
      g.add_tensor(epilogue_scalar_spec(step_operand(i), step.scalar, ys.dims.size()));
      pointers.push_back({step_operand(i), &scalars.back()});
      operand = step_operand(i);
    } else if (step.operand != EpilogueOperand::None) {
      g.add_tensor(operand_spec(step, ys, step_operand(i)));
      pointers.push_back({step_operand(i), step.tensor.data});
      operand = step_operand(i);
    }
    const PointwiseMode mode = *mode_of(step);  // steps_why_not accepted every step
    g.pointwise(mode.mode, input, operand, output, mode.scalars);
    input = output;
  }
}

EpilogueRun run_epilogue(const Graph& g, const VariantPointers& pointers) {
  EpilogueRun result{.graph = g.pattern()};
  // The caller's tier below is its unfused kernels (core/ops/fusion.cc).
  result.ran = run(g, pointers, counters().epilogue, "the block's unfused steps (core/ops/fusion.cc)");
  if (!result.ran) {
    result.why_not = fully_aligned(g) ? PlanCache::global().why_unsupported(plan_key(g))
                                      : std::string(kUnderAligned);
  }
  return result;
}

bool epilogue_fusable(const Strided& y, const std::vector<EpilogueStep>& steps) {
  if (!fusable(y) || steps.empty()) return false;
  for (const EpilogueStep& step : steps) {
    if (step.operand != EpilogueOperand::None && step.operand != EpilogueOperand::Scalar &&
        !fusable(step.tensor)) {
      return false;
    }
  }
  return true;
}

}  // namespace

EpilogueRun conv2d_epilogue_forward(const Strided& y, const std::optional<Strided>& z,
                                    const Strided& x, const Strided& w, const kernel::ConvParams& p,
                                    const std::vector<EpilogueStep>& steps) {
  if (!epilogue_fusable(y, steps) || !fusable(x)) return {.why_not = "float64 or empty tensors"};
  if (std::string why = steps_why_not(steps); !why.empty()) return {.why_not = why};
  TensorSpec ys = spec_of(y, kEpY);
  Graph g;
  for (const TensorSpec& s : {spec_of(x, kEpX), spec_of(w, kEpW), ys}) g.add_tensor(s);
  g.add_tensor(z ? spec_of(*z, kEpZ) : virtual_like(ys, kEpZ));
  g.conv(ConvDirection::Forward, kEpX, kEpW, kEpZ, p, CUDNN_DATA_FLOAT);
  VariantPointers pointers = {{kEpX, x.data}, {kEpW, w.data}, {kEpY, y.data}};
  if (z) pointers.push_back({kEpZ, z->data});
  std::vector<float> scalars;
  scalars.reserve(steps.size());
  add_epilogue(g, ys, steps, conv_operand_spec, scalars, pointers);
  return run_epilogue(g, pointers);
}

EpilogueRun linear_epilogue_forward(const Strided& y, const std::optional<Strided>& z,
                                    const Strided& x, const Strided& w,
                                    const std::vector<EpilogueStep>& steps) {
  if (!epilogue_fusable(y, steps) || !fusable(x)) return {.why_not = "float64 or empty tensors"};
  if (std::string why = steps_why_not(steps); !why.empty()) return {.why_not = why};
  const int64_t m = x.sizes[0], in = x.sizes[1], out = w.sizes[0];
  TensorSpec ys = matrix_spec(y, kEpY, m, out, out, 1);
  Graph g;
  g.add_tensor(matrix_spec(x, kEpX, m, in, in, 1));
  g.add_tensor(matrix_spec(w, kEpW, in, out, 1, in));  // w (Out, In) row-major, read as w^T
  g.add_tensor(ys);
  g.add_tensor(z ? matrix_spec(*z, kEpZ, m, out, out, 1) : virtual_like(ys, kEpZ));
  g.matmul(kEpX, kEpW, kEpZ, CUDNN_DATA_FLOAT);
  VariantPointers pointers = {{kEpX, x.data}, {kEpW, w.data}, {kEpY, y.data}};
  if (z) pointers.push_back({kEpZ, z->data});
  std::vector<float> scalars;
  scalars.reserve(steps.size());
  add_epilogue(g, ys, steps, matrix_operand_spec, scalars, pointers);
  return run_epilogue(g, pointers);
}

// ---- a user block's head, backward: the derivative chain ----------------------------------
// dy, z, operands -> replay: z -> t_1 -> ... (virtual) -> derivatives in reverse:
// g_n = dy -> ... -> g_0 = dL/dz, written (epilogue_backward) or fed virtual to
// dgrad / wgrad / the matmuls (*_epilogue_grads). t_e is step e's input, g_e the
// gradient w.r.t. it.

namespace {

enum DerivativeUid : int64_t { kDvDy = 1, kDvZ, kDvG, kDvX, kDvW, kDvDx, kDvDw, kDvFirstStep = 16 };

// Step e's uids: its replayed output t_{e+1}, its operand, g_e, its operand's gradient.
int64_t replayed(size_t e) { return kDvFirstStep + 4 * static_cast<int64_t>(e); }
int64_t dv_operand(size_t e) { return replayed(e) + 1; }
int64_t grad_in(size_t e) { return replayed(e) + 2; }
int64_t operand_grad(size_t e) { return replayed(e) + 3; }
int64_t input_of(size_t e) { return e == 0 ? kDvZ : replayed(e - 1); }  // t_e

// How the chain's y-shaped tensors and operands are described. A conv head's
// 4-D tensors as they are. A linear head's (M, Out): in a graph of pointwise
// ops only, as the 4-D (M, Out, 1, 1) NHWC view (cuDNN's pointwise engines
// take 4-D NHWC; a packed 2-D tensor is exactly that); beside a matmul, as
// (1, M, Out) matrices, or (1, Out, M) when the wgrad matmul reads g transposed.
enum class ChainForm { Conv, Rows, Matrix, MatrixTransposed };

struct ChainLayout {
  ChainForm form = ChainForm::Conv;
  int64_t rows = 0, cols = 0;  // M, Out

  TensorSpec spec(const Strided& t, int64_t uid) const {
    switch (form) {
      case ChainForm::Conv: return spec_of(t, uid);
      case ChainForm::Rows:
        return {.uid = uid, .dims = {rows, cols, 1, 1}, .strides = {cols, 1, cols, cols},
                .dtype = cudnn_dtype(t.dtype), .alignment = pointer_alignment(t.data)};
      case ChainForm::Matrix: return matrix_spec(t, uid, rows, cols, cols, 1);
      case ChainForm::MatrixTransposed: return matrix_spec(t, uid, cols, rows, 1, cols);
    }
    return spec_of(t, uid);
  }
  TensorSpec operand(const EpilogueStep& step, const TensorSpec& y, int64_t uid) const {
    if (step.operand == EpilogueOperand::Full) return spec(step.tensor, uid);
    switch (form) {
      case ChainForm::Conv:
      case ChainForm::Rows: return conv_operand_spec(step, y, uid);  // (1, Out, 1, 1)
      case ChainForm::Matrix: return matrix_operand_spec(step, y, uid);
      case ChainForm::MatrixTransposed: return matrix_spec(step.tensor, uid, cols, 1, 1, 1);
    }
    return conv_operand_spec(step, y, uid);
  }
};

// z is 4-D for a conv head, (M, Out) for a linear one; `form` says how a linear
// head's graph reads it.
ChainLayout chain_layout(const Strided& z, ChainForm form) {
  if (z.sizes.size() != 2) return {};
  return {.form = form, .rows = z.sizes[0], .cols = z.sizes[1]};
}

// Which replayed values t_0 (z) .. t_n the derivatives read, directly or to replay a later one.
std::vector<bool> replay_needed(const EpilogueBackwardArgs& a) {
  const size_t n = a.steps.size();
  std::vector<bool> need(n + 1, false);
  for (size_t e = 0; e < n; ++e) {
    const EpilogueStep& step = a.steps[e];
    if (step.op == EpilogueOp::Activation) need[reads_output(step) ? e + 1 : e] = true;
    if (step.op == EpilogueOp::Mul && a.grads[e].operand_grad) need[e] = true;
  }
  for (size_t e = n; e > 0; --e) need[e - 1] = need[e - 1] || need[e];
  return need;
}

// Step e's operand (a tensor or a by-value scalar) when the graph reads it; the
// scalars vector must not reallocate while pointers are in use (reserved by the caller).
std::optional<int64_t> add_operand(Graph& g, const ChainLayout& layout, const TensorSpec& like,
                                   const EpilogueStep& step, size_t e, std::vector<float>& scalars,
                                   VariantPointers& pointers) {
  if (step.operand == EpilogueOperand::None) return std::nullopt;
  const int64_t uid = dv_operand(e);
  if (step.operand == EpilogueOperand::Scalar) {
    scalars.push_back(static_cast<float>(step.scalar));
    g.add_tensor(epilogue_scalar_spec(uid, step.scalar, like.dims.size()));
    pointers.push_back({uid, &scalars.back()});
  } else {
    g.add_tensor(layout.operand(step, like, uid));
    pointers.push_back({uid, step.tensor.data});
  }
  return uid;
}

// Appends z, the operands the graph reads and the forward steps replayed from z
// as far as the derivatives need them; returns each step's operand uid.
std::vector<std::optional<int64_t>> add_replay(Graph& g, const ChainLayout& layout, const EpilogueBackwardArgs& a,
                                               std::vector<float>& scalars, VariantPointers& pointers) {
  const TensorSpec like = layout.spec(a.z, kDvZ);
  const std::vector<bool> need = replay_needed(a);
  if (need[0]) {
    g.add_tensor(like);
    pointers.push_back({kDvZ, a.z.data});
  }
  std::vector<std::optional<int64_t>> operands(a.steps.size());
  for (size_t e = 0; e < a.steps.size(); ++e) {
    const EpilogueStep& step = a.steps[e];
    if (need[e + 1] || step.op == EpilogueOp::Mul) {  // a mul's derivative reads its operand
      operands[e] = add_operand(g, layout, like, step, e, scalars, pointers);
    }
    if (!need[e + 1]) continue;
    g.add_tensor(virtual_like(like, replayed(e)));
    const PointwiseMode mode = *mode_of(step);  // epilogue_derivative_why_not accepted the chain
    g.pointwise(mode.mode, input_of(e), operands[e], replayed(e), mode.scalars);
  }
  return operands;
}

// Appends the derivative chain; the first step (from the end) that changes g
// writes kDvG, a tensor the caller adds (real or virtual). Requires a chain
// epilogue_derivative_why_not accepts.
void add_derivative(Graph& g, const ChainLayout& layout, const EpilogueBackwardArgs& a,
                    std::vector<float>& scalars, VariantPointers& pointers) {
  const size_t n = a.steps.size();
  const TensorSpec like = layout.spec(a.z, kDvZ);
  const std::vector<std::optional<int64_t>> operands = add_replay(g, layout, a, scalars, pointers);
  g.add_tensor(layout.spec(a.dy, kDvDy));
  pointers.push_back({kDvDy, a.dy.data});
  size_t last_change = n;  // the lowest step that changes g writes kDvG
  for (size_t e = 0; e < n && last_change == n; ++e) {
    if (!passes_through(a.steps[e])) last_change = e;
  }
  int64_t grad = kDvDy;
  for (size_t e = n; e-- > 0;) {
    const EpilogueStep& step = a.steps[e];
    const EpilogueStepGrad& d = a.grads[e];
    if (d.operand_grad) {
      g.add_tensor(layout.spec(*d.operand_grad, operand_grad(e)));
      pointers.push_back({operand_grad(e), d.operand_grad->data});
      if (step.op == EpilogueOp::Mul) {
        g.pointwise(CUDNN_POINTWISE_MUL, grad, input_of(e), operand_grad(e));
      } else {
        g.pointwise(CUDNN_POINTWISE_IDENTITY, grad, std::nullopt, operand_grad(e));
      }
    }
    if (passes_through(step)) continue;
    const int64_t next = e == last_change ? kDvG : grad_in(e);
    if (next != kDvG) g.add_tensor(virtual_like(like, next));
    if (step.op == EpilogueOp::Activation) {
      const PointwiseMode backward = *mode_of(step, /*backward=*/true);
      g.pointwise_backward(backward.mode, grad, reads_output(step) ? replayed(e) : input_of(e), next,
                           backward.scalars);
    } else {
      g.pointwise(CUDNN_POINTWISE_MUL, grad, operands[e], next);
    }
    grad = next;
  }
}

bool derivative_fusable(const EpilogueBackwardArgs& a) {
  if (!fusable(a.dy) || !fusable(a.z) || !epilogue_fusable(a.z, a.steps)) return false;
  return std::all_of(a.grads.begin(), a.grads.end(), [](const EpilogueStepGrad& d) {
    return !d.operand_grad || fusable(*d.operand_grad);
  });
}

// The plan for `key` now (built on a miss, as run_plan builds it); null, with
// why, when there is none: the cache's reason, lazy building not finished, or
// cuDNN refusing the description itself. That last is an error for a plain op,
// but a derivative graph only probes what cuDNN fuses, and the tier below runs.
// `final_answer`: the graph has no plan for good (not merely not yet).
std::shared_ptr<const Plan> plan_or_why(const PlanKey& key, const Graph& graph, std::string& why,
                                        bool& final_answer) {
  final_answer = true;
  try {
    if (std::shared_ptr<const Plan> plan = PlanCache::global().get(key, graph, /*has_fallback=*/true)) return plan;
  } catch (const CudnnError& e) {
    why = fmt::format("cuDNN refused the graph: {}", e.what());
    return nullptr;
  }
  why = PlanCache::global().why_unsupported(key);
  if (why.empty()) {
    final_answer = false;
    why = "its plan is still being built in the background (lazy plan building)";
  }
  return nullptr;
}

std::shared_ptr<const Plan> plan_or_why(const Graph& graph, std::string& why) {
  bool final_answer = false;
  return plan_or_why(plan_key(graph), graph, why, final_answer);
}

// Structures (plan_cache.h structure_of) of the dgrad/wgrad-fused derivative
// graphs cuDNN had no engine for. Probing one costs a heuristics query (and a
// build try per candidate it returns) per key, and on the H100 this tier never
// found an engine; what cuDNN fuses depends on the pattern, policy, layout and
// dtype far more than on the sizes. So the other sizes of a structure go
// straight to the tier below, at the price of missing an engine that only
// other sizes (another alignment) would get. Process-wide, like the plan
// cache, and kept across PlanCache::clear().
class NoEngineStructures {
 public:
  bool contains(const std::string& structure) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return structures_.contains(structure);
  }
  void insert(std::string structure) {
    std::lock_guard<std::mutex> lock(mutex_);
    structures_.insert(std::move(structure));
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_set<std::string> structures_;
};

NoEngineStructures& no_engine_structures() {
  static NoEngineStructures* const structures = new NoEngineStructures();  // outlives exit-time users
  return *structures;
}

void execute(const Plan& plan, const VariantPointers& pointers) {
  const Workspace workspace(static_cast<size_t>(plan.workspace_bytes()));
  plan.execute(handle(), pointers, workspace.get());
}

// A graph with its variant pack; the scalars the pack points to live here too.
struct ChainGraph {
  Graph graph;
  VariantPointers pointers;
  std::unique_ptr<std::vector<float>> scalars = std::make_unique<std::vector<float>>();
};

// The chain with g = kDvG virtual, for a consumer node the caller appends.
ChainGraph virtual_chain(const EpilogueBackwardArgs& a, ChainForm form, bool with_operand_grads) {
  EpilogueBackwardArgs args = a;
  if (!with_operand_grads) {
    for (EpilogueStepGrad& d : args.grads) d.operand_grad.reset();
  }
  ChainGraph c;
  c.scalars->reserve(a.steps.size());
  const ChainLayout layout = chain_layout(a.z, form);
  c.graph.add_tensor(virtual_like(layout.spec(a.z, kDvZ), kDvG));
  add_derivative(c.graph, layout, args, *c.scalars, c.pointers);
  return c;
}

// Runs every graph when each has a plan, else none; the unfused tier below is
// the derivative as one graph (epilogue_backward), so a miss records no fallback.
EpilogueRun run_all_or_none(std::vector<ChainGraph>& graphs) {
  EpilogueRun result;
  std::vector<std::shared_ptr<const Plan>> plans;
  for (const ChainGraph& c : graphs) {
    result.graph += (result.graph.empty() ? "" : "; ") + c.graph.pattern();
    if (!fully_aligned(c.graph)) {
      result.why_not = kUnderAligned;
      return result;
    }
    const PlanKey key = plan_key(c.graph);
    std::string structure = structure_of(key, c.graph);
    if (no_engine_structures().contains(structure)) {
      ++counters().epilogue_grads_skipped;
      result.why_not = fmt::format("no engine for {} (found at another size; probed once per structure)",
                                   structure);
      return result;
    }
    bool final_answer = false;
    std::shared_ptr<const Plan> plan = plan_or_why(key, c.graph, result.why_not, final_answer);
    if (!plan) {
      if (final_answer) no_engine_structures().insert(std::move(structure));
      return result;
    }
    plans.push_back(plan);
  }
  // Executed from the plans held here (not looked up again): a small cache may
  // have evicted the first graph's plan while the second was built.
  for (size_t i = 0; i < graphs.size(); ++i) {
    execute(*plans[i], graphs[i].pointers);
    result.engines.push_back(plans[i]->notes().engine_id);
  }
  ++counters().epilogue_grads;
  result.ran = true;
  return result;
}

}  // namespace

std::string epilogue_derivative_why_not(const EpilogueBackwardArgs& a) {
  bool changes = false;
  for (size_t e = 0; e < a.steps.size(); ++e) {
    const EpilogueStep& step = a.steps[e];
    if (passes_through(step)) continue;
    changes = true;
    if (!mode_of(step)) return steps_why_not(a.steps);
    if (step.op == EpilogueOp::Activation && !mode_of(step, /*backward=*/true)) {
      const kernel::ActivationInfo& row = kernel::activation_info(step.activation);
      return fmt::format("{} has no cuDNN backward mode that takes its saved {}", row.name,
                         reads_output(step) ? "output" : "input");
    }
  }
  return changes ? "" : "every step passes dy through unchanged (nothing to compute)";
}

EpilogueRun epilogue_backward(const Strided& g, const EpilogueBackwardArgs& a) {
  if (!derivative_fusable(a) || !fusable(g)) return {.why_not = "float64 or empty tensors"};
  const ChainLayout layout = chain_layout(a.z, ChainForm::Rows);
  Graph graph;
  graph.add_tensor(layout.spec(g, kDvG));
  VariantPointers pointers = {{kDvG, g.data}};
  std::vector<float> scalars;
  scalars.reserve(a.steps.size());
  add_derivative(graph, layout, a, scalars, pointers);
  EpilogueRun result{.graph = graph.pattern()};
  if (!fully_aligned(graph)) {
    result.why_not = kUnderAligned;
    return result;
  }
  std::shared_ptr<const Plan> plan = plan_or_why(graph, result.why_not);
  if (!plan) {
    PlanCache::global().record_fallback(plan_key(graph), "the block's per-step derivative ops (core/ops/fusion.cc)");
    return result;
  }
  execute(*plan, pointers);
  ++counters().epilogue_backward;
  result.engines.push_back(plan->notes().engine_id);
  result.ran = true;
  return result;
}

EpilogueRun conv2d_epilogue_grads(const std::optional<Strided>& dx, const std::optional<Strided>& dw,
                                  const Strided& x, const Strided& w, const kernel::ConvParams& p,
                                  const EpilogueBackwardArgs& a) {
  if (!derivative_fusable(a) || !fusable(x)) return {.why_not = "float64 or empty tensors"};
  if (!dx && !dw) return {.why_not = "neither dx nor dw is wanted"};
  // Runtime fusion is built for channels-last. On the H100 an NCHW dgrad graph
  // with the chain as its prologue (mul+add+swish_bwd+mul+conv_dgrad, tf32,
  // engine 4) never finished its test run: the GPU hung at 100%.
  if (!nhwc(x) || !nhwc(w) || (dx && !nhwc(*dx))) {
    return {.why_not = "the chain fuses into dgrad/wgrad in channels-last only"};
  }
  std::vector<ChainGraph> graphs;
  if (dx) {
    ChainGraph c = virtual_chain(a, ChainForm::Conv, /*with_operand_grads=*/true);
    c.graph.add_tensor(spec_of(w, kDvW));
    c.graph.add_tensor(spec_of(*dx, kDvDx));
    c.graph.conv(ConvDirection::BackwardData, kDvDx, kDvW, kDvG, p, CUDNN_DATA_FLOAT);
    c.pointers.insert(c.pointers.end(), {{kDvW, w.data}, {kDvDx, dx->data}});
    graphs.push_back(std::move(c));
  }
  if (dw) {
    ChainGraph c = virtual_chain(a, ChainForm::Conv, /*with_operand_grads=*/!dx);
    c.graph.add_tensor(spec_of(x, kDvX));
    c.graph.add_tensor(spec_of(*dw, kDvDw));
    c.graph.conv(ConvDirection::BackwardFilter, kDvX, kDvDw, kDvG, p, CUDNN_DATA_FLOAT);
    c.pointers.insert(c.pointers.end(), {{kDvX, x.data}, {kDvDw, dw->data}});
    graphs.push_back(std::move(c));
  }
  return run_all_or_none(graphs);
}

EpilogueRun linear_epilogue_grads(const std::optional<Strided>& dx, const std::optional<Strided>& dw,
                                  const Strided& x, const Strided& w, const EpilogueBackwardArgs& a) {
  if (!derivative_fusable(a) || !fusable(x)) return {.why_not = "float64 or empty tensors"};
  if (!dx && !dw) return {.why_not = "neither dx nor dw is wanted"};
  const int64_t m = x.sizes[0], in = x.sizes[1], out = w.sizes[0];
  std::vector<ChainGraph> graphs;
  if (dx) {  // g (1, M, Out) . w (1, Out, In) -> dx (1, M, In)
    ChainGraph c = virtual_chain(a, ChainForm::Matrix, /*with_operand_grads=*/true);
    c.graph.add_tensor(matrix_spec(w, kDvW, out, in, in, 1));
    c.graph.add_tensor(matrix_spec(*dx, kDvDx, m, in, in, 1));
    c.graph.matmul(kDvG, kDvW, kDvDx, CUDNN_DATA_FLOAT);
    c.pointers.insert(c.pointers.end(), {{kDvW, w.data}, {kDvDx, dx->data}});
    graphs.push_back(std::move(c));
  }
  if (dw) {  // g^T (1, Out, M) . x (1, M, In) -> dw (1, Out, In)
    ChainGraph c = virtual_chain(a, ChainForm::MatrixTransposed, /*with_operand_grads=*/!dx);
    c.graph.add_tensor(matrix_spec(x, kDvX, m, in, in, 1));
    c.graph.add_tensor(matrix_spec(*dw, kDvDw, out, in, in, 1));
    c.graph.matmul(kDvG, kDvX, kDvDw, CUDNN_DATA_FLOAT);
    c.pointers.insert(c.pointers.end(), {{kDvX, x.data}, {kDvDw, dw->data}});
    graphs.push_back(std::move(c));
  }
  return run_all_or_none(graphs);
}

FusedRuns fused_runs() {
  RunCounters& c = counters();
  return {.conv_bias_relu = c.conv_bias_relu, .bn_activation_forward = c.bn_activation_forward,
          .bn_activation_backward = c.bn_activation_backward, .dgrad_relu = c.dgrad_relu,
          .matmul_bias_relu = c.matmul_bias_relu, .epilogue = c.epilogue,
          .epilogue_backward = c.epilogue_backward, .epilogue_grads = c.epilogue_grads,
          .epilogue_grads_skipped = c.epilogue_grads_skipped};
}

}  // namespace loom::cudnn
