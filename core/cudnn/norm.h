// File: core/cudnn/norm.h
// Batch-norm training forward (with the running-statistics update) and backward
// on the GPU through cuDNN NORM_FORWARD / NORM_BACKWARD graphs, with Loom's
// kernels below them. (Inference has no standalone engine in cuDNN 9.19; it is
// a CUDA kernel in core/cuda/norm.h.)
//
// N batch, C channels, H, W. x, y, dy, dx are dense NCHW or NHWC (NHWC is
// cuDNN's native layout: less workspace, faster plan build); per-channel
// tensors are (C) float32.
#pragma once

#include "core/cudnn/variant_pointers.h"
#include "core/strided.h"

namespace loom::cudnn {

// Declared only: graph.h defines it with cuDNN types, which core/ops must not see.
class Graph;

struct BatchNormTrainingArgs {
  Strided y, save_mean, save_invstd;  // outputs: y (N,C,H,W); batch mean, 1/sqrt(var+eps) (C)
  Strided x, weight, bias;            // weight/bias (C): pass ones/zeros when not affine
  Strided running_mean, running_var;  // (C), updated in place with momentum
  double eps = 1e-5;
  double momentum = 0.1;
};

// Each runs its cuDNN graph where an engine exists and Loom's CUDA kernels
// (core/cuda/norm.h) otherwise; PlanCache::explain() shows which.
void batch_norm_forward_training(const BatchNormTrainingArgs& args);

struct BatchNormBackwardArgs {
  Strided dx, dweight, dbias;  // outputs
  Strided dy, x, weight, save_mean, save_invstd;
};
void batch_norm_backward(const BatchNormBackwardArgs& args);

// The graphs behind the two calls, and their variant packs: for tests that run
// every engine config cuDNN offers. By-value scalars live in BatchNormScalars,
// which must outlive any execute of the pointers.
struct BatchNormScalars {
  explicit BatchNormScalars(const BatchNormTrainingArgs& args);
  float eps, momentum;
};
Graph batch_norm_forward_graph(const BatchNormTrainingArgs& args);
VariantPointers batch_norm_forward_pointers(const BatchNormTrainingArgs& args,
                                            const BatchNormScalars& scalars);
Graph batch_norm_backward_graph(const BatchNormBackwardArgs& args);
VariantPointers batch_norm_backward_pointers(const BatchNormBackwardArgs& args);

// Layer norm of x viewed as (N, D) rows (dense, row-major): each row normalized
// by its own mean and variance, then * weight + bias (D). mean and inv_variance
// (N) are outputs of the forward and inputs of the backward; all float32.
// Where cuDNN has no engine (or a lazy plan is still building), Loom's kernels
// (core/cuda/layer_norm.h) run it.
struct LayerNormArgs {
  Strided y, mean, inv_variance;  // outputs
  Strided x, weight, bias;
  double eps = 1e-5;
};
void layer_norm_forward(const LayerNormArgs& args);

struct LayerNormBackwardArgs {
  Strided dx, dweight, dbias;  // outputs
  Strided dy, x, weight, mean, inv_variance;
};
void layer_norm_backward(const LayerNormBackwardArgs& args);

}  // namespace loom::cudnn
