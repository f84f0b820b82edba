// File: core/cudnn/norm.cc
// The batch-norm and layer-norm cuDNN graphs, each one Graph::norm node with its
// tensors, and Loom's CUDA kernels beneath them where no engine runs.
#include "core/cudnn/norm.h"

#include "core/cuda/layer_norm.h"
#include "core/cuda/norm.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/tensor_spec.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

enum Uid : int64_t {
  kX = 1, kScale, kBias, kEpsilon, kMomentum, kInMean, kInVar,
  kY, kMean, kInvVar, kOutMean, kOutVar, kDy, kDx, kDScale, kDBias,
};

// Where cuDNN has no engine (channel counts its runtime-fused BN engines
// decline, e.g. 29): Loom's kernels, which take any shape, layout and dtype.
constexpr std::string_view kFallbackTier = "Loom CUDA kernels (core/cuda/norm.h)";

int64_t channels(const Strided& x) { return x.sizes[1]; }

// 4-D view of (N, C) and (N, C, L) inputs; cuDNN's BN graphs are 4-D.
Strided as_4d(const Strided& t) {
  Strided v = t;
  while (v.sizes.size() < 4) {
    v.sizes.push_back(1);
    v.strides.push_back(1);
  }
  return v;
}

}  // namespace

Graph batch_norm_forward_graph(const BatchNormTrainingArgs& a) {
  Strided x = as_4d(a.x), y = as_4d(a.y);
  int64_t c = channels(x);
  Graph g;
  g.add_tensor(spec_of(x, kX));
  g.add_tensor(spec_of(y, kY));
  g.add_tensor(channel_spec(c, kScale, a.weight.data));
  g.add_tensor(channel_spec(c, kBias, a.bias.data));
  g.add_tensor(channel_spec(c, kInMean, a.running_mean.data));
  g.add_tensor(channel_spec(c, kInVar, a.running_var.data));
  g.add_tensor(channel_spec(c, kOutMean, a.running_mean.data));
  g.add_tensor(channel_spec(c, kOutVar, a.running_var.data));
  g.add_tensor(channel_spec(c, kMean, a.save_mean.data));
  g.add_tensor(channel_spec(c, kInvVar, a.save_invstd.data));
  g.add_tensor(scalar_spec(kEpsilon, 1e-5));
  g.add_tensor(scalar_spec(kMomentum, 0.1));
  g.norm(CUDNN_BATCH_NORM, Graph::NormPhase::Train, {
      .x = kX, .scale = kScale, .bias = kBias, .epsilon = kEpsilon, .momentum = kMomentum,
      .in_running_mean = kInMean, .in_running_var = kInVar, .y = kY, .mean = kMean,
      .inv_variance = kInvVar, .out_running_mean = kOutMean, .out_running_var = kOutVar});
  return g;
}

BatchNormScalars::BatchNormScalars(const BatchNormTrainingArgs& a)
    : eps(static_cast<float>(a.eps)), momentum(static_cast<float>(a.momentum)) {}

VariantPointers batch_norm_forward_pointers(const BatchNormTrainingArgs& a,
                                            const BatchNormScalars& scalars) {
  // The running statistics are read and written in place: each channel's update
  // reads only its own old value.
  return {{kX, a.x.data},        {kY, a.y.data},
          {kScale, a.weight.data}, {kBias, a.bias.data},
          {kInMean, a.running_mean.data}, {kInVar, a.running_var.data},
          {kOutMean, a.running_mean.data}, {kOutVar, a.running_var.data},
          {kMean, a.save_mean.data}, {kInvVar, a.save_invstd.data},
          {kEpsilon, &scalars.eps}, {kMomentum, &scalars.momentum}};
}

Graph batch_norm_backward_graph(const BatchNormBackwardArgs& a) {
  Strided x = as_4d(a.x), dy = as_4d(a.dy), dx = as_4d(a.dx);
  int64_t c = channels(x);
  Graph g;
  g.add_tensor(spec_of(x, kX));
  g.add_tensor(spec_of(dy, kDy));
  g.add_tensor(spec_of(dx, kDx));
  g.add_tensor(channel_spec(c, kScale, a.weight.data));
  g.add_tensor(channel_spec(c, kMean, a.save_mean.data));
  g.add_tensor(channel_spec(c, kInvVar, a.save_invstd.data));
  g.add_tensor(channel_spec(c, kDScale, a.dweight.data));
  g.add_tensor(channel_spec(c, kDBias, a.dbias.data));
  g.norm(CUDNN_BATCH_NORM, Graph::NormPhase::Backward, {.x = kX, .scale = kScale, .mean = kMean,
      .inv_variance = kInvVar, .dy = kDy, .dx = kDx, .dscale = kDScale, .dbias = kDBias});
  return g;
}

VariantPointers batch_norm_backward_pointers(const BatchNormBackwardArgs& a) {
  return {{kX, a.x.data},          {kDy, a.dy.data},           {kDx, a.dx.data},
          {kScale, a.weight.data}, {kMean, a.save_mean.data},  {kInvVar, a.save_invstd.data},
          {kDScale, a.dweight.data}, {kDBias, a.dbias.data}};
}

void batch_norm_forward_training(const BatchNormTrainingArgs& a) {
  BatchNormScalars scalars(a);
  const Graph forward = batch_norm_forward_graph(a);
  if (run_plan(forward, batch_norm_forward_pointers(a, scalars), kFallbackTier)) return;
  cuda::batch_norm_batch_stats(a.save_mean, a.save_invstd, a.x, a.eps,
                               kernel::RunningStats{a.running_mean, a.running_var, a.momentum});
  cuda::batch_norm_forward(a.y, a.x, a.save_mean, a.save_invstd, a.weight, a.bias);
}

void batch_norm_backward(const BatchNormBackwardArgs& a) {
  const Graph backward = batch_norm_backward_graph(a);
  if (run_plan(backward, batch_norm_backward_pointers(a), kFallbackTier)) return;
  cuda::batch_norm_backward(a.dx, a.dweight, a.dbias, a.dy, a.x, a.save_mean, a.save_invstd,
                            a.weight, /*training=*/true);
}

// ---- layer norm ------------------------------------------------------------------------
// x (N, D) as (N, D, 1, 1) with D innermost, weight and bias (1, D, 1, 1), the
// statistics (N, 1, 1, 1), as cudnn-frontend's layer-norm samples lay them out.

namespace {

enum LayerNormUid : int64_t {
  kLnX = 1, kLnScale, kLnBias, kLnEpsilon, kLnY, kLnMean, kLnInvVar, kLnDy, kLnDx, kLnDScale, kLnDBias,
};

constexpr std::string_view kLayerNormFallback = "Loom CUDA kernels (core/cuda/layer_norm.h)";

TensorSpec rows_spec(const Strided& t, int64_t uid) {
  const int64_t n = t.sizes[0], d = t.sizes[1];
  return {.uid = uid, .dims = {n, d, 1, 1}, .strides = {d, 1, d, d}, .dtype = cudnn_dtype(t.dtype),
          .alignment = pointer_alignment(t.data)};
}

TensorSpec row_vector_spec(const Strided& t, int64_t uid) {
  const int64_t d = t.sizes[0];
  return {.uid = uid, .dims = {1, d, 1, 1}, .strides = {d, 1, d, d}, .dtype = CUDNN_DATA_FLOAT,
          .alignment = pointer_alignment(t.data)};
}

TensorSpec statistics_spec(const Strided& t, int64_t uid) {
  return {.uid = uid, .dims = {t.sizes[0], 1, 1, 1}, .strides = {1, 1, 1, 1}, .dtype = CUDNN_DATA_FLOAT,
          .alignment = pointer_alignment(t.data)};
}

}  // namespace

void layer_norm_forward(const LayerNormArgs& a) {
  Graph g;
  g.add_tensor(rows_spec(a.x, kLnX));
  g.add_tensor(rows_spec(a.y, kLnY));
  g.add_tensor(row_vector_spec(a.weight, kLnScale));
  g.add_tensor(row_vector_spec(a.bias, kLnBias));
  g.add_tensor(statistics_spec(a.mean, kLnMean));
  g.add_tensor(statistics_spec(a.inv_variance, kLnInvVar));
  g.add_tensor(scalar_spec(kLnEpsilon, 1e-5));
  g.norm(CUDNN_LAYER_NORM, Graph::NormPhase::Train, {
      .x = kLnX, .scale = kLnScale, .bias = kLnBias, .epsilon = kLnEpsilon, .y = kLnY,
      .mean = kLnMean, .inv_variance = kLnInvVar});
  const float eps = static_cast<float>(a.eps);
  if (run_plan(g, {{kLnX, a.x.data}, {kLnY, a.y.data}, {kLnScale, a.weight.data},
                   {kLnBias, a.bias.data}, {kLnMean, a.mean.data}, {kLnInvVar, a.inv_variance.data},
                   {kLnEpsilon, &eps}},
               kLayerNormFallback)) {
    return;
  }
  cuda::layer_norm_forward(a.y, a.mean, a.inv_variance, a.x, a.weight, a.bias, a.eps);
}

void layer_norm_backward(const LayerNormBackwardArgs& a) {
  Graph g;
  g.add_tensor(rows_spec(a.x, kLnX));
  g.add_tensor(rows_spec(a.dy, kLnDy));
  g.add_tensor(rows_spec(a.dx, kLnDx));
  g.add_tensor(row_vector_spec(a.weight, kLnScale));
  g.add_tensor(row_vector_spec(a.dweight, kLnDScale));
  g.add_tensor(row_vector_spec(a.dbias, kLnDBias));
  g.add_tensor(statistics_spec(a.mean, kLnMean));
  g.add_tensor(statistics_spec(a.inv_variance, kLnInvVar));
  g.norm(CUDNN_LAYER_NORM, Graph::NormPhase::Backward, {.x = kLnX, .scale = kLnScale, .mean = kLnMean,
      .inv_variance = kLnInvVar, .dy = kLnDy, .dx = kLnDx, .dscale = kLnDScale, .dbias = kLnDBias});
  if (run_plan(g, {{kLnX, a.x.data}, {kLnDy, a.dy.data}, {kLnDx, a.dx.data},
                   {kLnScale, a.weight.data}, {kLnDScale, a.dweight.data}, {kLnDBias, a.dbias.data},
                   {kLnMean, a.mean.data}, {kLnInvVar, a.inv_variance.data}},
               kLayerNormFallback)) {
    return;
  }
  cuda::layer_norm_backward(a.dx, a.dweight, a.dbias, a.dy, a.x, a.mean, a.inv_variance, a.weight);
}

}  // namespace loom::cudnn
