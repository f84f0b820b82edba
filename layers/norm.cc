// File: layers/norm.cc
// The norm layers: parameters and buffers as PyTorch names them, the
// mode-dependent choice of statistics, and BatchNorm's num_batches_tracked counter.
// N batch, C channels, H, W.
#include "layers/norm.h"

#include <fmt/format.h>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/norm.h"
#include "layers/repr.h"

namespace loom::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, BatchNorm2dOptions options)
    : num_features_(num_features), options_(options) {
  LOOM_CHECK(num_features > 0, ValueError, "[BatchNorm2d] num_features must be positive, got {}",
             num_features);
  LOOM_CHECK(options.eps >= 0, ValueError, "[BatchNorm2d] eps must be non-negative, got {}",
             options.eps);
  LOOM_CHECK(!options.momentum || (*options.momentum >= 0 && *options.momentum <= 1), ValueError,
             "[BatchNorm2d] momentum must be in [0, 1] (or nullopt for a cumulative average), "
             "got {}",
             options.momentum.value_or(0));
  if (options.affine) {
    weight_ = register_parameter("weight", empty({num_features}));
    bias_ = register_parameter("bias", empty({num_features}));
  }
  if (options.track_running_stats) {
    running_mean_ = register_buffer("running_mean", empty({num_features}));
    running_var_ = register_buffer("running_var", empty({num_features}));
    num_batches_tracked_ =
        register_buffer("num_batches_tracked", empty({}, {.dtype = DType::Int64}));
  }
  reset_parameters();
}

void BatchNorm2d::reset_running_stats() {
  if (!options_.track_running_stats) return;
  running_mean_.zero_();
  running_var_.fill_(1.0);
  num_batches_tracked_.zero_();
}

void BatchNorm2d::reset_parameters() {
  reset_running_stats();
  if (!options_.affine) return;
  NoGradGuard no_grad;
  weight_.fill_(1.0);
  bias_.zero_();
}

double BatchNorm2d::forward_momentum() {
  if (!updates_running_stats()) return 0.0;
  if (options_.momentum) return *options_.momentum;
  return 1.0 / (num_batches_tracked_.item() + 1.0);  // a cumulative average of the batches so far
}

// Only the next step's forward reads the counter (momentum=None), from the host.
void BatchNorm2d::count_batch() { increment_(num_batches_tracked_, 1, CounterOrder::AtCaptureEnd); }

Tensor BatchNorm2d::forward(const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() == 4, ShapeError,
             "[BatchNorm2d] expects input (N, C, H, W), got shape {}; for (N, C) or (N, C, L) "
             "use BatchNorm1d",
             x.defined() ? shape_str(x.sizes()) : "undefined");
  return normalize(x);
}

Tensor BatchNorm2d::normalize(const Tensor& x) {
  LOOM_CHECK(x.size(1) == num_features_, ShapeError,
             "[{}] input of shape {} has {} channels, but the layer was built for {}", type_name(),
             shape_str(x.sizes()), x.size(1), num_features_);
  const double momentum = forward_momentum();
  if (reduce_ && is_training()) {
    const bool update = updates_running_stats();
    Tensor y = replica_batch_norm(
        x, {.running_mean = update ? running_mean_ : Tensor(),
            .running_var = update ? running_var_ : Tensor(), .weight = weight_, .bias = bias_,
            .momentum = momentum, .eps = options_.eps},
        reduce_);
    if (update) count_batch();
    return y;
  }
  // As PyTorch: batch statistics in training, and in eval too when none are tracked.
  const bool batch_stats = is_training() || !options_.track_running_stats;
  Tensor y = batch_norm(x, running_mean_, running_var_, weight_, bias_,
                        {.training = batch_stats, .momentum = momentum, .eps = options_.eps});
  if (updates_running_stats()) count_batch();
  return y;
}

Tensor BatchNorm1d::forward(const Tensor& x) {
  LOOM_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), ShapeError,
             "[BatchNorm1d] expects input (N, C) or (N, C, L), got shape {}; for (N, C, H, W) "
             "use BatchNorm2d",
             x.defined() ? shape_str(x.sizes()) : "undefined");
  return normalize(x);
}

std::string BatchNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features_,
                     python_float(options_.eps), python_float(options_.momentum),
                     python_bool(options_.affine), python_bool(options_.track_running_stats));
}

LayerNorm::LayerNorm(Shape normalized_shape, LayerNormOptions options)
    : normalized_shape_(std::move(normalized_shape)), options_(options) {
  LOOM_CHECK(!normalized_shape_.empty() && numel_of(normalized_shape_) > 0, ValueError,
             "[LayerNorm] normalized_shape must name at least one non-empty dim, got {}",
             shape_str(normalized_shape_));
  LOOM_CHECK(options.eps >= 0, ValueError, "[LayerNorm] eps must be non-negative, got {}", options.eps);
  if (options.elementwise_affine) {
    weight_ = register_parameter("weight", empty(normalized_shape_));
    if (options.bias) bias_ = register_parameter("bias", empty(normalized_shape_));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  NoGradGuard no_grad;
  if (weight_.defined()) weight_.fill_(1.0);
  if (bias_.defined()) bias_.zero_();
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape_, weight_, bias_, options_.eps);
}

// "(4, 5), eps=1e-05, elementwise_affine=True", as PyTorch prints it.
std::string LayerNorm::extra_repr() const {
  std::string shape = fmt::format("({}{})", fmt::join(normalized_shape_, ", "),
                                  normalized_shape_.size() == 1 ? "," : "");
  std::string repr = fmt::format("{}, eps={}, elementwise_affine={}", shape, python_float(options_.eps),
                                 python_bool(options_.elementwise_affine));
  if (options_.elementwise_affine && !options_.bias) repr += ", bias=False";
  return repr;
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options)
    : num_groups_(num_groups), num_channels_(num_channels), options_(options) {
  LOOM_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, ValueError,
             "[GroupNorm] num_channels must be divisible by num_groups (both positive), got "
             "num_channels={} and num_groups={}",
             num_channels, num_groups);
  LOOM_CHECK(options.eps >= 0, ValueError, "[GroupNorm] eps must be non-negative, got {}", options.eps);
  if (options.affine) {
    weight_ = register_parameter("weight", empty({num_channels}));
    bias_ = register_parameter("bias", empty({num_channels}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (!options_.affine) return;
  NoGradGuard no_grad;
  weight_.fill_(1.0);
  bias_.zero_();
}

Tensor GroupNorm::forward(const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() >= 2 && x.size(1) == num_channels_, ShapeError,
             "[GroupNorm] expects input (N, {}, ...), got shape {}", num_channels_,
             x.defined() ? shape_str(x.sizes()) : "undefined");
  return group_norm(x, num_groups_, weight_, bias_, options_.eps);
}

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups_, num_channels_, python_float(options_.eps),
                     python_bool(options_.affine));
}

InstanceNorm2d::InstanceNorm2d(int64_t num_features, InstanceNorm2dOptions options)
    : num_features_(num_features), options_(options) {
  LOOM_CHECK(num_features > 0, ValueError, "[InstanceNorm2d] num_features must be positive, got {}",
             num_features);
  LOOM_CHECK(options.eps >= 0 && options.momentum >= 0 && options.momentum <= 1, ValueError,
             "[InstanceNorm2d] needs eps >= 0 and momentum in [0, 1], got eps={} and momentum={}",
             options.eps, options.momentum);
  if (options.affine) {
    weight_ = register_parameter("weight", empty({num_features}));
    bias_ = register_parameter("bias", empty({num_features}));
  }
  if (options.track_running_stats) {
    running_mean_ = register_buffer("running_mean", empty({num_features}));
    running_var_ = register_buffer("running_var", empty({num_features}));
    num_batches_tracked_ = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::Int64}));
  }
  reset_parameters();
}

void InstanceNorm2d::reset_parameters() {
  NoGradGuard no_grad;
  if (options_.track_running_stats) {
    running_mean_.zero_();
    running_var_.fill_(1.0);
  }
  if (!options_.affine) return;
  weight_.fill_(1.0);
  bias_.zero_();
}

Tensor InstanceNorm2d::forward(const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() == 4 && x.size(1) == num_features_, ShapeError,
             "[InstanceNorm2d] expects input (N, {}, H, W), got shape {}", num_features_,
             x.defined() ? shape_str(x.sizes()) : "undefined");
  // As PyTorch: the instance's own statistics unless tracked ones exist in eval mode.
  const bool input_stats = is_training() || !options_.track_running_stats;
  return instance_norm(x, running_mean_, running_var_, weight_, bias_,
                       {.use_input_stats = input_stats, .momentum = options_.momentum, .eps = options_.eps});
}

std::string InstanceNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features_,
                     python_float(options_.eps), python_float(options_.momentum),
                     python_bool(options_.affine), python_bool(options_.track_running_stats));
}

}  // namespace loom::nn
