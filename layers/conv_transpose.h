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

using loom::Size2;

// The layer's settings: the functional op's geometry (loom::ConvTranspose2dOptions,
// the same fields) and what only a layer has, a bias of its own and the generator
// of its initial weights: nn::ConvTranspose2dOptions{.stride = 2, .bias = false}.
struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;         // removed from both sides of the output
  Size2 output_padding = 0;  // added to one side, to pick among the output sizes a stride allows
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;                // whether the layer owns a bias (K)
  Generator* generator = nullptr;  // for the initial weights; the default generator when null
};

class ConvTranspose2d : public Module {
 public:
  // weight (C, K/groups, R, S) and bias (K), initialised as PyTorch does.
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                  ConvTranspose2dOptions options = {});

  Tensor forward(const Tensor& x) override;  // x (N, C, H, W) -> (N, K, P, Q)
  void reset_parameters(Generator* generator = nullptr);

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  // The functional conv_transpose2d's options its forward calls with.
  const loom::ConvTranspose2dOptions& options() const { return options_; }

  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2 kernel_size_;
  loom::ConvTranspose2dOptions options_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace loom::nn
