// File: core/ops/fusion.h
// Fused blocks for users: declare a conv or linear layer followed by any chain
// of pointwise ops (optionally a batch norm and a residual add), then run it.
//
//   auto block = fusion::Block().conv2d({.padding = {1, 1}}).bias().activation(ActivationKind::Gelu);
//   // block.operand_names() == {"weight", "bias"}
//   Tensor y = block(x, {weight, bias});   // gelu(conv2d(x, weight) + bias)
//   y.sum().backward();                    // x, weight and bias get their gradients
//
// How it runs. With loom::FusionGuard off the block evaluates its ops one by one
// with the public ops (forward_unfused): the reference, gradchecked in float64.
// Otherwise it is cut into pieces, on the GPU each as large as cuDNN has engines
// for (on the CPU the same pieces run the CPU kernels, bit-identical to the
// one-by-one run, and a piece equal to a fused op uses its fused CPU kernel):
//   head      conv2d or linear + the pointwise steps after it, as ONE cuDNN
//             graph (conv/matmul -> add/mul/activation ... -> y); where no
//             engine takes it, the plain kernels run the same steps;
//   norm      batch_norm (+ residual) + an activation row as the fused
//             batch-norm graph (a residual after the activation, as
//             nn::Residual adds it, is a separate add: that graph adds only
//             before its activation); on the GPU a training norm right
//             after [conv2d -> bias] absorbs the bias (the batch mean takes it
//             out again): the conv runs without it, the running mean still
//             counts it, its gradient is zero;
//   pointwise any steps left, through the public ops.
// A head's backward is derived from its steps: the graph also writes the
// conv/matmul output z; backward replays the steps from z and walks them in
// reverse (each step's derivative written once), then runs conv dgrad / wgrad
// (or the two matmuls). On the GPU the chain runs, best first, fused into the
// dgrad / wgrad graphs, else as one pointwise graph writing g = dL/dz before
// the plain dgrad / wgrad (core/cudnn/fused.h), else as one public op per step
// (the CPU's evaluation, and the last resort). Pieces that equal a fused op
// (conv2d_bias_relu, linear_relu, batch_norm_activation) run that op, forward and
// backward. fusion::report() (fusion_report.h) says what fused, on which
// engine, and why the rest did not.
//
// N batch, C in channels, H, W input, K out channels (the block's channels).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/kernel/activation.h"
#include "core/ops/conv.h"
#include "core/ops/norm.h"
#include "core/tensor.h"

namespace loom::fusion {

using kernel::ActivationKind;

enum class StepKind {
  Conv2d,      // operand "weight" (K, C/groups, R, S)
  Linear,      // operand "weight" (out, in); the block's channels are the last dim
  Bias,        // operand "bias" (K): y + bias per channel
  BatchNorm,   // operands "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var"
  Activation,  // one row of core/kernel/activation.h
  Add,         // y + operand, or y + scalar
  Sub,         // y - operand, or y - scalar
  Mul,         // y * operand, or y * scalar
  ScaleBias,   // operands "scale", "shift" (K): y * scale + shift per channel
  Residual,    // operand "residual" (y's shape; never broadcast): y + residual
};

struct Step {
  StepKind kind = StepKind::Activation;
  Conv2dOptions conv;                // Conv2d
  BatchNormOptions norm;             // BatchNorm
  ActivationKind activation = ActivationKind::Relu;
  std::vector<double> parameters;    // Activation: the row's scalars as given (its defaults for the rest)
  std::optional<double> scalar;      // Add / Sub / Mul by this number; else by a tensor operand
};

// A block is a description (no tensors): copy it, print it, run it on any inputs.
class Block {
 public:
  // --- declaring the block, in order; each returns *this -------------------------
  Block& conv2d(Conv2dOptions options = {});  // must come first
  Block& linear();                            // must come first
  Block& bias();
  Block& batch_norm(BatchNormOptions options = {});
  Block& activation(ActivationKind kind, std::vector<double> parameters = {});
  Block& relu() { return activation(ActivationKind::Relu); }
  Block& gelu() { return activation(ActivationKind::Gelu); }
  Block& silu() { return activation(ActivationKind::Silu); }
  Block& add();  // by a tensor operand that broadcasts to y
  Block& sub();
  Block& mul();
  Block& add(double value);
  Block& sub(double value);
  Block& mul(double value);
  Block& scale_bias();
  Block& add_residual();

  // --- running it ------------------------------------------------------------------
  // y = the steps applied to x; `operands` in the order of operand_names()
  // (an undefined tensor for a batch norm's missing weight, bias or statistics).
  // Differentiable w.r.t. x and every operand; BatchNormOptions::training says
  // whether the norm uses (and updates) batch statistics.
  Tensor operator()(const Tensor& x, const std::vector<Tensor>& operands) const;
  // The one-by-one evaluation with the public ops: the reference for the above.
  Tensor forward_unfused(const Tensor& x, const std::vector<Tensor>& operands) const;
  // The pieces the GPU runs, with the derived backward; on the CPU the pieces
  // use the CPU kernels (so tests can gradcheck the derived backward there).
  Tensor forward_pieces(const Tensor& x, const std::vector<Tensor>& operands) const;

  // --- looking at it ---------------------------------------------------------------
  const std::vector<Step>& steps() const { return steps_; }
  std::vector<std::string> operand_names() const;
  // "conv2d(stride=1, padding=1) -> bias -> batch_norm -> add_residual -> gelu";
  // a batch norm in eval mode reads "batch_norm(eval)".
  std::string str() const;
  // The pieces as the GPU runs them: "[conv2d -> bias -> gelu] [batch_norm -> relu]".
  std::string pieces_str() const;

 private:
  Block& push(Step step);
  std::vector<Step> steps_;
};

}  // namespace loom::fusion
