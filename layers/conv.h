// File: layers/conv.h
// Conv2d and Conv1d, as torch.nn.Conv2d and Conv1d (their padding="same" /
// "valid" and padding_mode included), over loom::conv2d and loom::conv1d.
//
// N batch, C in channels, H, W (or L) input, K out channels, R, S filter, P, Q output.
//
//   nn::Conv2d conv(3, 64, 3, {.padding = 1, .bias = false});
//   Tensor y = conv(x);  // x (N, 3, H, W) -> y (N, 64, H, W)
//   nn::Conv2d same(64, 64, 4, {.padding = nn::Padding::Same});          // (N, 64, H, W) for any H, W
//   nn::Conv2d mirrored(3, 64, 7, {.padding = 3, .padding_mode = PadMode::Reflect});
//   nn::Conv1d taps(1, 16, 9, {.stride = 2, .padding = 4});            // (N, 1, L) -> (N, 16, ceil(L / 2))
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/conv.h"
#include "core/ops/pad.h"
#include "core/size2.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

using loom::PadMode;
using loom::Size2;

// PyTorch's padding="valid" (none) and padding="same" (the output keeps the
// input's H and W; stride 1 only). Where a dilated filter extent
// dilation * (R - 1) is odd, "same" puts the odd pixel at the bottom / right,
// as PyTorch does.
enum class Padding { Valid, Same };

// Conv2d's padding: an amount on both sides of H and W (an int or {h, w}), or a
// Padding; Conv1d's: an int or a Padding.
struct ConvPadding {
  ConvPadding(int64_t both) : amount(both) {}  // implicit: `.padding = 1`
  ConvPadding(int64_t height, int64_t width) : amount(height, width) {}
  ConvPadding(Size2 hw) : amount(hw) {}
  ConvPadding(Padding padding) : amount(0), kind(padding) {}

  Size2 amount;
  std::optional<Padding> kind;  // set for Valid and Same (amount then unused)
};

// The layer's settings: the functional op's geometry (loom::Conv2dOptions, the
// same fields) and what only a layer has, a bias of its own, how it pads and
// the generator of its initial weights: nn::Conv2dOptions{.padding = 1, .bias = false}.
struct Conv2dOptions {
  Size2 stride = 1;
  ConvPadding padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;  // whether the layer owns a bias (K)
  // What the padding holds, as torch's padding_mode: Constant is "zeros";
  // Reflect and Replicate pad the input with loom::pad first.
  PadMode padding_mode = PadMode::Constant;
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
  // The functional conv2d's options its forward calls with (bias(): whether it
  // has one), on the input padded_input() gives.
  const loom::Conv2dOptions& options() const { return options_; }
  // x as the convolution reads it: x itself, or x through loom::pad where the
  // layer pads other than with zeros on both sides (padding_mode, or "same"
  // with an odd filter extent); the fused layers call it too.
  Tensor padded_input(const Tensor& x) const;

  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2 kernel_size_;
  loom::Conv2dOptions options_;
  ConvPadding padding_;  // as given, for extra_repr
  PadMode padding_mode_;
  std::vector<int64_t> input_pads_;  // loom::pad's pads before the convolution; empty for none
  Tensor weight_;
  Tensor bias_;
};

// Conv1d's settings, as nn::Conv2dOptions with single ints.
struct Conv1dOptions {
  int64_t stride = 1;
  ConvPadding padding = 0;  // one number on both ends, or Padding::Valid / Same
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  PadMode padding_mode = PadMode::Constant;
  Generator* generator = nullptr;
};

class Conv1d : public Module {
 public:
  // weight (K, C/groups, R) and bias (K), initialised as PyTorch does.
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {});

  Tensor forward(const Tensor& x) override;  // x (N, C, L) or (C, L) -> (N, K, L') or (K, L')
  void reset_parameters(Generator* generator = nullptr);

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  int64_t kernel_size() const { return kernel_size_; }
  // The functional conv1d's options its forward calls with, after the pads of
  // padding_mode or an uneven "same" (as Conv2d::padded_input).
  const loom::Conv1dOptions& options() const { return options_; }

  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  int64_t kernel_size_;
  loom::Conv1dOptions options_;
  ConvPadding padding_;  // as given, for extra_repr
  PadMode padding_mode_;
  std::vector<int64_t> input_pads_;  // loom::pad's (before, after) along L; empty for none
  Tensor weight_;
  Tensor bias_;
};

}  // namespace loom::nn
