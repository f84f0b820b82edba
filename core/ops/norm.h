// File: core/ops/norm.h
// The normalization family, as torch.nn.functional's: one composite,
// normalize(x, reduce_dims), and batch, layer, group and instance norm as its
// parameterisations (which dims are reduced, where the statistics come from,
// the affine composed after). Batch norm keeps its own kernels on every tier
// (CPU reference, oneDNN, cuDNN NORM_FORWARD / NORM_BACKWARD) for speed.
//
// Batch normalization, as torch.nn.functional.batch_norm:
//
//   // training: normalize by batch statistics, update the running ones in place
//   Tensor y = loom::batch_norm(x, running_mean, running_var, weight, bias, {.training = true});
//   // eval: normalize by the running statistics
//   Tensor z = loom::batch_norm(x, running_mean, running_var, weight, bias, {.training = false});
//
// N batch, C channels, M = N * H * W (or N for 2-D input), the count per channel.
// x (N, C) or (N, C, H, W) (any (N, C, ...) works), any strides; y has x's layout.
// weight, bias, running_mean, running_var are (C) or undefined:
//   - no weight / bias: no affine transform (weight 1, bias 0);
//   - no running stats: none are tracked, so only training mode is possible.
// Differentiable w.r.t. x, weight and bias; the running stats are buffers, not inputs.
// A bfloat16/float16 x (GPU only, as autocast's activations) takes float32
// weight, bias and running stats, computes in float32 and returns y in x's dtype.
#pragma once

#include "core/tensor.h"

namespace loom {

struct BatchNormOptions {
  bool training = true;   // batch statistics (and update running ones) vs running statistics
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch statistic
  double eps = 1e-5;      // added to the variance before the square root
};

// Training: y = (x - mean) / sqrt(var + eps) * weight + bias with the batch mean and
// biased variance per channel; running_mean and running_var, when given, are blended
// in place (without recording grad) toward the batch mean and the UNBIASED variance
// var * M / (M - 1). Needs M >= 2, or M = 0: as in PyTorch, an empty batch gives
// an empty output, leaves the running statistics as they are, and weight and
// bias zero gradients (M = 1 is refused: its variance is 0/0).
// Eval: the same with running_mean and running_var, which must be given.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, BatchNormOptions options = {});

// Layer normalization, as torch.nn.functional.layer_norm: each sample is
// normalized over its last normalized_shape.size() dims, which must equal
// normalized_shape: y = (x - mean) / sqrt(var + eps) * weight + bias with the
// biased variance. weight and bias have normalized_shape, or are undefined (no
// affine transform). A composite of elementwise and reduction ops on every
// device, so its gradient (x, weight, bias) comes from theirs.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5);

// (x - mean) / sqrt(var + eps) with the mean and biased variance over
// `reduce_dims` (kept as size 1 for the broadcast): the primitive every norm
// composes its affine after. Differentiable. Reduced over its trailing dims it
// runs one row kernel a pass: on the GPU cuDNN's layer-norm graph for float32
// (Loom's kernels beneath it, and for float64, bfloat16 and float16), on the
// CPU Loom's for float32 and float64; over other dims, the composite of ops.
Tensor normalize(const Tensor& x, const Shape& reduce_dims, double eps = 1e-5);

// Group normalization, as torch.nn.functional.group_norm: x (N, C, ...) with
// C divisible by num_groups; each sample's C / num_groups channels of a group
// are normalized together (all their spatial values), then y * weight + bias
// per channel. weight and bias are (C) or undefined, of x's dtype (float32 for
// a bfloat16 / float16 x, which then returns in x's dtype). y has x's layout.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

struct InstanceNormOptions {
  bool use_input_stats = true;  // each instance's statistics, else the running ones
  double momentum = 0.1;        // as BatchNormOptions::momentum
  double eps = 1e-5;
};

// Instance normalization, as torch.nn.functional.instance_norm: x (N, C, ...)
// with at least one spatial dim; each (sample, channel) is normalized over its
// spatial values, then y * weight + bias per channel. running_mean and
// running_var (C) are optional, as in PyTorch: with use_input_stats they are
// blended in place toward the batch average of the instances' means and
// unbiased variances; without, they normalize x (batch_norm's eval mode) and
// must be given. weight and bias as group_norm's.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = {}, const Tensor& running_var = {},
                     const Tensor& weight = {}, const Tensor& bias = {},
                     InstanceNormOptions options = {});

}  // namespace loom
