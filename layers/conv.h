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
#include "core/tensor.h"
#include "layers/module.h"
#include "layers/size2.h"

namespace loom::nn {

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;  // zeros on both sides
  Size2 dilation = 1;
  int64_t groups = 1;  // C and K split into this many independent convolutions
  bool bias = true;
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
  const Conv2dOptions& options() const { return options_; }
  // The geometry as loom::conv2d takes it (the functional op's options).
  loom::Conv2dOptions functional_options() const;

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
