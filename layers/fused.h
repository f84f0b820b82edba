// File: layers/fused.h
// Fused layers and nn::fuse, which rewrites a model to run runs of layers as
// fused blocks (core/ops/fusion.h):
//
//   nn::Sequential net = nn::mnist_net();
//   nn::fuse(net);  // [Conv2d, BatchNorm2d, ReLU, ...] -> [FusedConv2d, FusedBatchNorm2d, Identity, ...]
//
// A run is a Conv2d, then optionally a BatchNorm2d, then any activations; a
// Linear then activations; or a BatchNorm2d then activations. Its first layer
// becomes the fused head (a subclass of that layer, built from it), which runs
// the whole run as one fusion::Block; a batch norm after a conv stays in place
// as an absorbed FusedBatchNorm2d (forward: identity) and an activation as an
// Identity. Every layer keeps the very same parameter and buffer tensors under
// the same names: state_dict names and values, an optimizer's parameter list
// and the outputs stay the same.
//
// Residual adds are matched too. A Residual (in a Sequential) whose last branch
// (b, or inner) is a Sequential ending in a fused run becomes a FusedResidual:
// the run's head ends its block with the add, so resnet9's x + relu(bn(conv(h)))
// runs as the block conv2d -> batch_norm -> relu -> add_residual with x as the
// residual operand. The children ("a", "b" or "inner") and their tensors stay.
//
// A MaxPool2d right before a Flatten is given output_format = Contiguous, so
// that the flatten of a channels-last model's features is a view, not a copy.
//
//   nn::Sequential net = nn::resnet9();
//   nn::fuse(net);
//   net.at<nn::FusedResidual>(3).block().str();
//       // "conv2d(stride=1, padding=1) -> batch_norm -> relu -> add_residual"
//
// FusedConv2dReLU, BatchNormReLU and LinearReLU are the fused ops as layers,
// for code that builds them by name.
//
// N batch, C channels, H, W, K out channels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ops/fusion.h"
#include "core/tensor.h"
#include "layers/activation.h"
#include "layers/container.h"
#include "layers/conv.h"
#include "layers/identity.h"  // what a fused activation is replaced by
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/norm.h"

namespace loom::nn {

// relu(conv(x)) through loom::conv2d_bias_relu.
class FusedConv2dReLU : public Conv2d {
 public:
  using Conv2d::Conv2d;
  explicit FusedConv2dReLU(const Conv2d& conv) : Conv2d(conv) {}  // shares conv's tensors

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FusedConv2dReLU"; }
};

// relu(bn(x)) through loom::batch_norm_relu, with BatchNorm2d's running
// statistics and num_batches_tracked bookkeeping.
class BatchNormReLU : public BatchNorm2d {
 public:
  using BatchNorm2d::BatchNorm2d;
  explicit BatchNormReLU(const BatchNorm2d& bn) : BatchNorm2d(bn) {}  // shares bn's tensors

  Tensor forward(const Tensor& x) override;  // x (N, C, H, W)
  std::string type_name() const override { return "BatchNormReLU"; }
};

// relu(linear(x)) through loom::linear_relu.
class LinearReLU : public Linear {
 public:
  using Linear::Linear;
  explicit LinearReLU(const Linear& linear) : Linear(linear) {}  // shares linear's tensors

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LinearReLU"; }
};

// The first layer of a fused run, which runs the whole run as one fusion::Block;
// a FusedResidual asks it to end that block with the residual add.
class FusedHead {
 public:
  virtual ~FusedHead() = default;
  virtual fusion::Block block() = 0;  // the block forward runs (batch-norm modes read now)
  // The run on x, then + residual (of the run's output shape), as one block:
  // block() -> add_residual.
  virtual Tensor forward_residual(const Tensor& x, const Tensor& residual) = 0;
};

// A BatchNorm2d in a fused run: the head of [BatchNorm2d, activations...], or
// absorbed after a conv (then its forward is the identity: the conv's block
// applied it, reading this layer's tensors, mode and options).
class FusedBatchNorm2d : public BatchNorm2d, public FusedHead {
 public:
  // Shares bn's tensors. As a head it runs bn then `activations`; absorbed, it
  // has none (the conv before it runs them).
  FusedBatchNorm2d(const BatchNorm2d& bn, std::vector<std::shared_ptr<Activation>> activations,
                   bool absorbed);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FusedBatchNorm2d"; }
  // As a head only: an absorbed one is part of its conv's block (ValueError).
  fusion::Block block() override;
  Tensor forward_residual(const Tensor& x, const Tensor& residual) override;

  bool absorbed() const { return absorbed_; }
  // The block's batch-norm step for this forward (mode and momentum as BatchNorm2d's),
  // its four operands, and the batch count afterwards.
  BatchNormOptions step_options();
  std::vector<Tensor> operands() const;
  void count_if_training();

 private:
  Tensor run_block(const Tensor& x, const Tensor& residual);  // residual: undefined for none

  std::vector<std::shared_ptr<Activation>> activations_;
  bool absorbed_;
};

// conv2d (+ bias) (+ the absorbed batch norm) + activations as one fusion::Block.
class FusedConv2d : public Conv2d, public FusedHead {
 public:
  FusedConv2d(const Conv2d& conv, std::shared_ptr<FusedBatchNorm2d> norm,
              std::vector<std::shared_ptr<Activation>> activations);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FusedConv2d"; }
  fusion::Block block() override;  // the norm's mode read now
  Tensor forward_residual(const Tensor& x, const Tensor& residual) override;

 private:
  Tensor run_block(const Tensor& x, const Tensor& residual);  // residual: undefined for none

  std::shared_ptr<FusedBatchNorm2d> norm_;
  std::vector<std::shared_ptr<Activation>> activations_;
};

// linear (+ bias) + activations as one fusion::Block.
class FusedLinear : public Linear, public FusedHead {
 public:
  FusedLinear(const Linear& linear, std::vector<std::shared_ptr<Activation>> activations);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FusedLinear"; }
  fusion::Block block() override;
  Tensor forward_residual(const Tensor& x, const Tensor& residual) override;

 private:
  Tensor run_block(const Tensor& x, const Tensor& residual);  // residual: undefined for none

  std::vector<std::shared_ptr<Activation>> activations_;
};

// A Residual whose last branch ends in a fused run: forward runs the branch up
// to the run's head and has the head add x at the end of its block, so
// x + b(a(x)) is computed as b(a(x)) + x in one block (the same sum, bit for
// bit on the CPU). Built from a Residual, it shares its children ("a", "b" or
// "inner") and so every tensor and state_dict name. Should the branch no longer
// end in a fused run (changed after fusing), forward is Residual's.
class FusedResidual : public Residual {
 public:
  // Shares residual's children; ValueError unless its last branch is a
  // Sequential that ends in a fused run (the head, then only Identity or
  // absorbed FusedBatchNorm2d layers), as nn::fuse leaves it.
  explicit FusedResidual(const Residual& residual);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FusedResidual"; }
  // The tail head's block, ending in add_residual (ValueError as above).
  fusion::Block block();
};

// Rewrites every Sequential in `model` (recursively, through any container) in
// place, each run of layers described above becoming one fused head plus the
// absorbed layers in their old places, then each Residual child whose last
// branch ends in a fused run (branches are fused first) becoming a FusedResidual,
// and each MaxPool2d before a Flatten writing its output contiguous.
// Only those exact layer types start or join a run or match (not subclasses,
// which may change forward); any activation row joins; modes are kept. A
// Residual outside a Sequential (the model itself, a member of your module)
// keeps its separate add. Fusing twice changes nothing.
void fuse(Module& model);

}  // namespace loom::nn
