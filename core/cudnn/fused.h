// File: core/cudnn/fused.h
// Fused cuDNN graphs: several layers' work in one plan, so the intermediate
// never goes through global memory. Each call returns false when cuDNN has no
// engine for its configuration (cached as unsupported, with the reason in
// PlanCache::why_unsupported), and the op then runs the unfused kernels.
//
//   conv_bias_relu_fprop  y = relu(conv(x, w) + b)                    any layout
//   bn_act_fwd_train      y = act(bn(x) + z), batch + running stats   NHWC preferred
//   bn_dact_bwd           dAct then NORM_BACKWARD (dx, dscale, dbias, dz)
//   conv_dgrad_drelu      dx = dgrad(dy, w) * (r > 0)                 NHWC
//   matmul_bias_relu      y = relu(x . w^T + b)                       TF32 / bf16 only
//   *_epilogue_forward    y = steps(conv(x, w) or x . w^T), optionally also z = conv(x, w):
//                         a user block's head (core/ops/fusion.h)
//   epilogue_backward     g = dL/dz: the head's steps' derivative chain from dy and z
//   *_epilogue_grads      the same chain fused into dgrad / wgrad (or the two matmuls)
//
// N batch, C channels, H, W input, K out channels, R, S filter, P, Q output;
// M rows, In, Out features. Every tensor is a device tensor, dense NCHW or NHWC
// (dims always logical); per-channel vectors are dense (C) float32 as in norm.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cudnn/conv.h"  // conv2d_bias_relu_forward
#include "core/cudnn/norm.h"
#include "core/kernel/activation.h"
#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cudnn {

// An activation row (core/kernel/activation.h) with its scalars, as the fused
// batch-norm graphs apply it.
struct NormActivation {
  kernel::ActivationKind kind = kernel::ActivationKind::Relu;
  kernel::ActivationParameters parameters = kernel::act::Relu::info.default_parameters;
};

// Training batch norm, then + residual (N, C, H, W) when given, then the
// activation: args.y gets act(bn(x) + residual); mean, inv_variance and the
// running statistics as batch_norm_forward_training writes them. x, y,
// residual share one layout and dtype (float32, or bfloat16 / float16 with
// float32 per-channel tensors). False where the row has no cuDNN forward mode
// or no engine runs the graph.
bool batch_norm_activation_forward_training(const BatchNormTrainingArgs& args, const NormActivation& activation,
                                            const std::optional<Strided>& residual);

// The backward of the call above, from its saved tensors.
struct BatchNormActivationBackwardArgs {
  Strided dx, dweight, dbias;        // outputs: dx (N, C, H, W), dweight, dbias (C)
  std::optional<Strided> dresidual;  // output, given exactly when the forward added a residual
  Strided dy;
  std::optional<Strided> dy_addend;  // a second gradient of y, added to dy (autograd's sum, folded)
  Strided x, y;                      // y: the forward's output, act(bn(x) + z)
  Strided weight, bias, save_mean, save_invstd;
  // The residual's values; none with a dresidual when the caller kept only y (a row whose
  // derivative reads its output), so nothing recomputes bn(x) + z.
  std::optional<Strided> residual;
  NormActivation activation;
};
// Tries, in order: the pre-activation value recomputed by a NORM_FORWARD inference op into a
// virtual tensor (cuDNN's "BN inference -> dReLU -> dBN"); the same recomputed by pointwise
// ops; for a row whose derivative reads its output (ReLU), the derivative from the saved y.
// False where the row has no cuDNN backward mode or no engine runs any of them.
bool batch_norm_activation_backward(const BatchNormActivationBackwardArgs& args);

// dx (N, C, H, W) = dgrad(dy (N, K, P, Q), w) where r > 0, else 0. r is the
// ReLU's input or output (same sign), laid out as dx.
bool conv2d_dgrad_relu(const Strided& dx, const Strided& dy, const Strided& w, const Strided& r,
                       const kernel::ConvParams& p);

// y (M, Out) = relu(x (M, In) . w^T + b (Out)); x, w (Out, In), y row-major.
// Only under the Tf32 and Bf16 policies: strict fp32 has no fused engine.
bool linear_bias_relu_forward(const Strided& y, const Strided& x, const Strided& w,
                              const Strided& b);

// ---- a user block's head: conv or matmul, then a pointwise epilogue (core/ops/fusion.h) ----

// One pointwise op after the conv / matmul: y = op(t) for an activation, else
// y = op(t, operand). fused.cc lowers it to cuDNN's pointwise modes, so this
// header names no cuDNN type and core/ops includes it in every build.
enum class EpilogueOp { Add, Sub, Mul, Activation };
enum class EpilogueOperand {
  None,     // a unary mode (an activation)
  Scalar,   // a host number, passed by value
  Channel,  // a (K) vector of y's dtype, broadcast over everything else
  Full,     // a tensor of y's shape and layout
};
struct EpilogueStep {
  EpilogueOp op = EpilogueOp::Add;
  kernel::ActivationKind activation = kernel::ActivationKind::Relu;  // op == Activation
  kernel::ActivationParameters parameters{};  // the activation's, defaults filled in
  EpilogueOperand operand = EpilogueOperand::None;
  double scalar = 0;
  Strided tensor;  // Channel / Full
};

// Whether a step passes the gradient through unchanged (up to sign): an add or
// a sub, whose derivative with respect to its input is 1.
inline bool passes_through(const EpilogueStep& step) {
  return step.op == EpilogueOp::Add || step.op == EpilogueOp::Sub;
}

// What one try built: the graph's pattern (for fusion::report), the engine of
// each graph that ran and, when nothing ran, why (the plan cache's reason).
struct EpilogueRun {
  bool ran = false;
  std::string graph;
  std::vector<int64_t> engines;
  std::string why_not;
};

// y (N, K, P, Q) = epilogue(conv(x, w)); z, when given, also gets conv(x, w)
// itself (the backward's input). At least one step.
EpilogueRun conv2d_epilogue_forward(const Strided& y, const std::optional<Strided>& z,
                                    const Strided& x, const Strided& w, const kernel::ConvParams& p,
                                    const std::vector<EpilogueStep>& steps);
// y (M, Out) = epilogue(x (M, In) . w^T), w (Out, In); z as above. Row-major 2-D.
EpilogueRun linear_epilogue_forward(const Strided& y, const std::optional<Strided>& z,
                                    const Strided& x, const Strided& w,
                                    const std::vector<EpilogueStep>& steps);

// ---- a user block's head, backward: the epilogue's derivative chain ----------------
// From dy (y's shape and layout) and z, the forward's steps are replayed from z
// into virtual tensors, then each step's derivative runs in reverse: add and sub
// pass g through, mul multiplies by its operand, an activation runs its *_BWD
// mode on the replayed input or output. Nothing in between is written.

// What one step's derivative needs beyond the forward's EpilogueStep (an
// activation's *_BWD mode and whether it reads the step's output come from its row).
struct EpilogueStepGrad {
  // Where the graph writes the step operand's gradient before its reduction over
  // the broadcast dims: g (add, sub) or g * the step's input (mul); y's shape and layout.
  std::optional<Strided> operand_grad;
};

struct EpilogueBackwardArgs {
  Strided dy, z;  // y's shape, layout and dtype (linear: 2-D (M, Out))
  std::vector<EpilogueStep> steps;     // as the forward ran them
  std::vector<EpilogueStepGrad> grads;  // one per step
};

// "" when the chain has a graph form, else why not (a step without a *_BWD mode,
// or every step passes g through, so there is nothing to compute).
std::string epilogue_derivative_why_not(const EpilogueBackwardArgs& a);

// g = dL/dz (z's shape, layout and dtype) as one pointwise graph.
EpilogueRun epilogue_backward(const Strided& g, const EpilogueBackwardArgs& a);

// The chain fused into the head's own backward, g never written: dx = dgrad(g, w)
// and dw = wgrad(x, g) (each when given), one graph each; the steps' operand
// gradients ride on the first. Runs nothing unless every graph has a plan. A
// graph structure (sizes left out) without an engine is probed once per process.
EpilogueRun conv2d_epilogue_grads(const std::optional<Strided>& dx, const std::optional<Strided>& dw,
                                  const Strided& x, const Strided& w, const kernel::ConvParams& p,
                                  const EpilogueBackwardArgs& a);
// The same for a linear head: dx (M, In) = g . w, dw (Out, In) = g^T . x.
EpilogueRun linear_epilogue_grads(const std::optional<Strided>& dx, const std::optional<Strided>& dw,
                                  const Strided& x, const Strided& w, const EpilogueBackwardArgs& a);

// How many times each fused graph ran (process-wide), so tests and benchmarks
// can tell the fused path from the fallback.
struct FusedRuns {
  int64_t conv_bias_relu = 0;
  int64_t bn_activation_forward = 0;
  int64_t bn_activation_backward = 0;
  int64_t dgrad_relu = 0;
  int64_t matmul_bias_relu = 0;
  int64_t epilogue = 0;  // a user block's head (conv2d_epilogue_forward, linear_epilogue_forward)
  int64_t epilogue_backward = 0;  // its derivative chain as one graph (epilogue_backward)
  int64_t epilogue_grads = 0;     // its derivative fused into dgrad / wgrad (*_epilogue_grads)
  // *_epilogue_grads tries answered without a probe: a graph of the same
  // structure (other sizes) had no engine before.
  int64_t epilogue_grads_skipped = 0;
};
FusedRuns fused_runs();

}  // namespace loom::cudnn
