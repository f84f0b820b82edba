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
#include "core/tensor.h"
#include "layers/module.h"
#include "layers/size2.h"

namespace loom::nn {

struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;         // removed from both sides of the output
  Size2 output_padding = 0;  // added to one side, to pick among the output sizes a stride allows
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
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
  const ConvTranspose2dOptions& options() const { return options_; }

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
