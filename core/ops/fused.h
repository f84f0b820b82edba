// File: core/ops/fused.h
// Fused ops: one call for a layer and the ReLU after (or before) it. Each equals
// its unfused composite, forward and backward; on the GPU it runs a fused cuDNN
// graph (core/cudnn/fused.h) when cuDNN has an engine, else the unfused kernels.
// The CPU runs the reference kernels with the same explicit backward.
//
//   Tensor y = loom::conv2d_bias_relu(x, w, b, {.padding = {1, 1}});  // relu(conv2d(x, w, b))
//   Tensor z = loom::batch_norm_relu(x, rm, rv, gamma, beta, {}, skip); // relu(bn(x) + skip)
//   Tensor u = loom::batch_norm_activation(x, rm, rv, gamma, beta, {}, ActivationKind::Relu6);
//
//   loom::FusionGuard unfused(false);  // both paths stay reachable, for tests and benchmarks
//
// N batch, C channels, H, W input, K out channels, R, S filter, P, Q output.
#pragma once

#include <vector>

#include "core/ops/activation.h"
#include "core/ops/conv.h"
#include "core/ops/norm.h"
#include "core/tensor.h"

namespace loom {

// Whether the GPU may take fused graphs (default on). Off, every fused op runs
// its unfused kernels; results agree up to the kernels' rounding.
void set_fusion_enabled(bool enabled);
bool fusion_enabled();

// Sets fusion on or off for its lifetime, restoring the previous setting after.
class FusionGuard {
 public:
  explicit FusionGuard(bool enabled);
  ~FusionGuard();
  FusionGuard(const FusionGuard&) = delete;
  FusionGuard& operator=(const FusionGuard&) = delete;

 private:
  bool previous_;
};

// relu(conv2d(x, weight, bias, options)); arguments as conv2d's.
// GPU: conv -> + bias -> relu in one graph.
Tensor conv2d_bias_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        Conv2dOptions options = {});

// conv2d(relu(x), weight, bias, options); arguments as conv2d's.
// GPU backward: dx = dgrad(dy, w) * (x > 0) in one graph (NHWC).
Tensor relu_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   Conv2dOptions options = {});

// act(batch_norm(x, ...) + residual) for the activation row `kind` with its
// scalars (as activation() takes them: ReLU6 none, Hardtanh {min_val, max_val});
// the residual (x's shape) is optional. Arguments as batch_norm's;
// differentiable w.r.t. x, weight, bias and residual. Training on the GPU,
// x (N, C, H, W): bn -> (+ residual) -> act in one graph where the row has a
// cuDNN mode and an engine runs it, and a backward of dAct -> dBN in one graph
// (dresidual is the dAct output); else the norm and the activation kernels.
// Eval mode runs the unfused ops.
Tensor batch_norm_activation(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                             const Tensor& weight, const Tensor& bias, BatchNormOptions options,
                             ActivationKind kind, const std::vector<double>& parameters = {},
                             const Tensor& residual = Tensor());

// relu(batch_norm(x, ...) + residual): batch_norm_activation with ActivationKind::Relu.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, BatchNormOptions options = {},
                       const Tensor& residual = Tensor());

// relu(linear(x, weight, bias)); arguments as linear's. x (*, in) -> (*, out).
// GPU, with a bias, under the Tf32 or Bf16 policy: matmul -> + bias -> relu in
// one graph (strict fp32 has no fused engine).
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace loom
