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
#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/norm.h"

namespace loom::nn {

// forward(x) = x; takes the place of a ReLU that was fused into the layer before it,
// so the Sequential keeps its indices (and state_dict names).
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }
};

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

// A BatchNorm2d in a fused run: the head of [BatchNorm2d, activations...], or
// absorbed after a conv (then its forward is the identity: the conv's block
// applied it, reading this layer's tensors, mode and options).
class FusedBatchNorm2d : public BatchNorm2d {
 public:
  // Shares bn's tensors. As a head it runs bn then `activations`; absorbed, it
  // has none (the conv before it runs them).
  FusedBatchNorm2d(const BatchNorm2d& bn, std::vector<std::shared_ptr<Activation>> activations,
                   bool absorbed);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FusedBatchNorm2d"; }

  bool absorbed() const { return absorbed_; }
  // The block's batch-norm step for this forward (mode and momentum as BatchNorm2d's),
  // its four operands, and the batch count afterwards.
  BatchNormOptions step_options();
  std::vector<Tensor> operands() const;
  void count_if_training();

 private:
  std::vector<std::shared_ptr<Activation>> activations_;
  bool absorbed_;
};

// conv2d (+ bias) (+ the absorbed batch norm) + activations as one fusion::Block.
class FusedConv2d : public Conv2d {
 public:
  FusedConv2d(const Conv2d& conv, std::shared_ptr<FusedBatchNorm2d> norm,
              std::vector<std::shared_ptr<Activation>> activations);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FusedConv2d"; }
  fusion::Block block();  // the block this forward runs (the norm's mode read now)

 private:
  std::shared_ptr<FusedBatchNorm2d> norm_;
  std::vector<std::shared_ptr<Activation>> activations_;
};

// linear (+ bias) + activations as one fusion::Block.
class FusedLinear : public Linear {
 public:
  FusedLinear(const Linear& linear, std::vector<std::shared_ptr<Activation>> activations);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FusedLinear"; }
  fusion::Block block() const;

 private:
  std::vector<std::shared_ptr<Activation>> activations_;
};

// Rewrites every Sequential in `model` (recursively, through any container) in
// place, each run of layers described above becoming one fused head plus the
// absorbed layers in their old places. Only those exact layer types start or
// join a run (not subclasses, which may change forward); any activation row
// joins; modes are kept. Fusing twice changes nothing.
void fuse(Module& model);

}  // namespace loom::nn
