// File: layers/fused.h
// Fused layers (a layer and the ReLU after it, run by one fused op) and
// nn::fuse, which rewrites a model to use them:
//
//   nn::Sequential net = nn::mnist_net();
//   nn::fuse(net);  // [Conv2d, BatchNorm2d, ReLU, ...] -> [Conv2d, BatchNormReLU, Identity, ...]
//
// Each fused layer IS the layer it replaces (a subclass, built from it), holding
// the very same parameter and buffer tensors under the same names: state_dict
// names and values, an optimizer's parameter list and the outputs stay the same.
//
// N batch, C channels, H, W, K out channels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"
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

// Rewrites every Sequential in `model` (recursively, through any container) in
// place: [Conv2d, ReLU] -> [FusedConv2dReLU, Identity], [BatchNorm2d, ReLU] ->
// [BatchNormReLU, Identity], [Linear, ReLU] -> [LinearReLU, Identity]. Only
// those exact layer types are fused (not subclasses, which may change forward);
// modes are kept. Fusing twice changes nothing.
void fuse(Module& model);

}  // namespace loom::nn
