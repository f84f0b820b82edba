// File: layers/conv_transpose.h
// ConvTranspose2d, as torch.nn.ConvTranspose2d (learned upsampling), over
// loom::conv_transpose2d. Its weight is (C, K/groups, R, S), in-channels
// first, as PyTorch's, so state_dicts move between the two unchanged.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
//
//   nn::ConvTranspose2d up(16, 8, 2, {.stride = 2});
//   Tensor y = up(x);  // x (N, 16, H, W) -> y (N, 8, 2H, 2W)
#pragma once

#include <cstdint>
#include <string>

#include "core/generator.h"
#include "core/ops/conv_transpose.h"
#include "core/size2.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

// The functional op's options type, which also holds the layer's bias and
// generator settings: nn::ConvTranspose2dOptions{.stride = 2, .bias = false}.
using loom::ConvTranspose2dOptions;
using loom::Size2;

class ConvTranspose2d : public Module {
 public:
  // weight (C, K/groups, R, S) and bias (K), initialised as PyTorch does.
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                  ConvTranspose2dOptions options = {});

  Tensor forward(const Tensor& x) override;  // x (N, C, H, W) -> (N, K, P, Q)
  void reset_parameters(Generator* generator = nullptr);

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  const ConvTranspose2dOptions& options() const { return options_; }  // generator reset to null

  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2 kernel_size_;
  ConvTranspose2dOptions options_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace loom::nn
