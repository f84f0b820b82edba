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

// The functional op's options type, which also holds the layer's bias and
// generator settings: nn::Conv2dOptions{.padding = 1, .bias = false}.
using loom::Conv2dOptions;
using loom::Size2;

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
  const Conv2dOptions& options() const { return options_; }  // generator reset to null

  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2 kernel_size_;
  Conv2dOptions options_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace loom::nn
