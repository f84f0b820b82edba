// File: layers/pooling.h
// 2-D pooling layers, as torch.nn's MaxPool2d, AvgPool2d, AdaptiveAvgPool2d and
// AdaptiveMaxPool2d.
//
// N batch, C channels, H, W input, P, Q output.
//
//   nn::MaxPool2d pool(2);                                  // stride = kernel_size
//   nn::AvgPool2d avg(3, {.stride = 2, .padding = 1});
//   nn::AdaptiveMaxPool2d head(1);                          // (N, C, H, W) -> (N, C, 1, 1)
//   nn::AdaptiveMaxPool2d grid({7, 7});                     // (N, C, H, W) -> (N, C, 7, 7)
#pragma once

#include <optional>
#include <string>

#include "core/size2.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

using loom::Size2;

struct MaxPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  // kernel_size when not given, as PyTorch
  Size2 padding = 0;                           // at most half the kernel
  bool ceil_mode = false;
  // The output's memory layout; the input's when not given. nn::fuse sets
  // Contiguous on a max pool right before a Flatten, whose flatten is then a view.
  std::optional<MemoryFormat> output_format = std::nullopt;
};

struct AvgPool2dOptions {
  std::optional<Size2> stride = std::nullopt;  // kernel_size when not given
  Size2 padding = 0;                           // at most half the kernel
  bool ceil_mode = false;
  bool count_include_pad = true;  // padding counts in each window's divisor
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, MaxPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;  // x (N, C, H, W) -> (N, C, P, Q)
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Size2 kernel_size() const { return kernel_size_; }
  const MaxPool2dOptions& options() const { return options_; }

 private:
  Size2 kernel_size_;
  Size2 stride_;
  MaxPool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, AvgPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;  // x (N, C, H, W) -> (N, C, P, Q)
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_;
  Size2 stride_;
  AvgPool2dOptions options_;
};

// Any positive output_size (P, Q): x (N, C, H, W) -> (N, C, P, Q), as adaptive_avg_pool2d.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override { return "output_size=" + output_size_.str(); }

 private:
  Size2 output_size_;
};

// Any positive output_size (P, Q): x (N, C, H, W) -> (N, C, P, Q), as adaptive_max_pool2d.
class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AdaptiveMaxPool2d"; }
  std::string extra_repr() const override { return "output_size=" + output_size_.str(); }

 private:
  Size2 output_size_;
};

}  // namespace loom::nn
