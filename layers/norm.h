// File: layers/norm.h
// The norm layers, as torch.nn's: BatchNorm1d/2d over loom::batch_norm,
// LayerNorm, GroupNorm and InstanceNorm2d over the functional ops of
// core/ops/norm.h, with PyTorch's parameter and buffer names.
//
// N batch, C channels (num_features), H, W.
//
//   nn::BatchNorm2d bn(64);
//   Tensor y = bn(x);  // training: batch statistics, running ones updated
//   bn.eval();
//   Tensor z = bn(x);  // eval: running statistics
//
// Parameters weight (C) = 1 and bias (C) = 0 when affine; buffers running_mean
// (C) = 0, running_var (C) = 1 and num_batches_tracked (int64, 0-d) = 0 when
// track_running_stats, so state_dict names match PyTorch's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "layers/module.h"
#include "layers/sync_norm.h"

namespace loom::nn {

struct BatchNorm2dOptions {
  double eps = 1e-5;
  // running = (1 - momentum) * running + momentum * batch statistic; nullopt
  // averages all batches seen so far equally (PyTorch's momentum=None; each
  // training forward then reads the count back, so it cannot be captured into
  // a CUDA graph).
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learn weight and bias
  bool track_running_stats = true;  // without: batch statistics in eval mode too
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNorm2dOptions options = {});

  // x (N, C, H, W) -> y, same shape and layout. In training mode with running
  // statistics tracked, num_batches_tracked is incremented, as in PyTorch.
  Tensor forward(const Tensor& x) override;
  void reset_running_stats();
  void reset_parameters();  // running stats, weight 1, bias 0

  const Tensor& weight() const { return weight_; }  // undefined unless affine
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }  // undefined unless tracked
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_tracked_; }
  int64_t num_features() const { return num_features_; }
  const BatchNorm2dOptions& options() const { return options_; }

  // Training-mode statistics over every replica's batch through `reduce`
  // (layers/sync_norm.h), as torch.nn.SyncBatchNorm; nullptr: this process's
  // batch alone. Evaluation always uses the running statistics.
  // distributed/sync_batch_norm.h sets it from a process group.
  void set_replica_reduce(std::shared_ptr<ReplicaReduce> reduce) { reduce_ = std::move(reduce); }
  const std::shared_ptr<ReplicaReduce>& replica_reduce() const { return reduce_; }

  std::string type_name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;

 protected:
  // The forward of every rank, once the subclass has checked the rank.
  Tensor normalize(const Tensor& x);
  // Whether this forward updates the running statistics, and with what momentum.
  bool updates_running_stats() const { return is_training() && options_.track_running_stats; }
  double forward_momentum();
  // Counts the batch on the counter's device (a kernel on the GPU, so a captured
  // training step counts every replay).
  void count_batch();

 private:

  int64_t num_features_;
  BatchNorm2dOptions options_;
  Tensor weight_;
  Tensor bias_;
  Tensor running_mean_;
  Tensor running_var_;
  Tensor num_batches_tracked_;
  std::shared_ptr<ReplicaReduce> reduce_;
};

// Batch norm over (N, C) or (N, C, L) inputs, as after a Linear: the same
// parameters, buffers, state_dict names and statistics as BatchNorm2d, per
// feature C over the batch (and L).
using BatchNorm1dOptions = BatchNorm2dOptions;

class BatchNorm1d : public BatchNorm2d {
 public:
  using BatchNorm2d::BatchNorm2d;
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm1d"; }
};

// LayerNorm, as torch.nn.LayerNorm over loom::layer_norm: normalizes each
// sample over its trailing normalized_shape dims. Parameters weight = 1 and
// bias = 0 of normalized_shape when elementwise_affine (bias only with `bias`),
// so state_dict names match PyTorch's.
struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
  bool bias = true;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {});

  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  const Tensor& weight() const { return weight_; }  // undefined unless elementwise_affine
  const Tensor& bias() const { return bias_; }      // undefined unless affine with bias
  const Shape& normalized_shape() const { return normalized_shape_; }

  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

 private:
  Shape normalized_shape_;
  LayerNormOptions options_;
  Tensor weight_, bias_;
};

// GroupNorm, as torch.nn.GroupNorm over loom::group_norm: x (N, C, ...) with
// C = num_channels divisible by num_groups. Parameters weight (C) = 1 and bias
// (C) = 0 when affine.
struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options = {});

  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  const Tensor& weight() const { return weight_; }  // undefined unless affine
  const Tensor& bias() const { return bias_; }

  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;

 private:
  int64_t num_groups_, num_channels_;
  GroupNormOptions options_;
  Tensor weight_, bias_;
};

// InstanceNorm2d, as torch.nn.InstanceNorm2d over loom::instance_norm: x (N, C,
// H, W). PyTorch's defaults: no affine, no running statistics. With
// track_running_stats, buffers running_mean (C) = 0, running_var (C) = 1 and
// num_batches_tracked (int64, 0-d; PyTorch keeps it for state_dicts and does
// not count) are registered and eval mode normalizes by the running statistics.
struct InstanceNorm2dOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = false;
  bool track_running_stats = false;
};

class InstanceNorm2d : public Module {
 public:
  explicit InstanceNorm2d(int64_t num_features, InstanceNorm2dOptions options = {});

  Tensor forward(const Tensor& x) override;
  void reset_parameters();  // running stats 0 and 1, weight 1, bias 0

  const Tensor& weight() const { return weight_; }  // undefined unless affine
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }  // undefined unless tracked
  const Tensor& running_var() const { return running_var_; }

  std::string type_name() const override { return "InstanceNorm2d"; }
  std::string extra_repr() const override;

 private:
  int64_t num_features_;
  InstanceNorm2dOptions options_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

}  // namespace loom::nn
