// File: layers/conv.h
// Conv2d, as torch.nn.Conv2d (zero padding), over loom::conv2d.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
//
//   nn::Conv2d conv(3, 64, 3, {.padding = 1, .bias = false});
//   Tensor y = conv(x);  // x (N, 3, H, W) -> y (N, 64, H, W)
#pragma once

#include <cstdint>
#include <string>

#include "core/generator.h"
#include "core/ops/conv.h"
#include "core/size2.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

using loom::Size2;

// The layer's settings: the functional op's geometry (loom::Conv2dOptions, the
// same fields) and what only a layer has, a bias of its own and the generator
// of its initial weights: nn::Conv2dOptions{.padding = 1, .bias = false}.
struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;  // zeros on both sides
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;                // whether the layer owns a bias (K)
  Generator* generator = nullptr;  // for the initial weights; the default generator when null
};

class Conv2d : public Module {
 public:
  // weight (K, C/groups, R, S) and bias (K), initialised as PyTorch does.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {});

  Tensor forward(const Tensor& x) override;  // x (N, C, H, W) -> (N, K, P, Q)
  void reset_parameters(Generator* generator = nullptr);

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  Size2 kernel_size() const { return kernel_size_; }
  // The functional conv2d's options its forward calls with (bias(): whether it has one).
  const loom::Conv2dOptions& options() const { return options_; }

  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2 kernel_size_;
  loom::Conv2dOptions options_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace loom::nn
