// File: layers/pooling.h
// Pooling layers, as torch.nn's MaxPool2d, AvgPool2d, AdaptiveAvgPool2d and
// AdaptiveMaxPool2d, and their 1-D forms (MaxPool1d, ...) over (N, C, L).
//
// N batch, C channels, H, W input, P, Q output.
//
//   nn::MaxPool2d pool(2);                                  // stride = kernel_size
//   nn::AvgPool2d avg(3, {.stride = 2, .padding = 1});
//   nn::AdaptiveMaxPool2d head(1);                          // (N, C, H, W) -> (N, C, 1, 1)
//   nn::AdaptiveMaxPool2d grid({7, 7});                     // (N, C, H, W) -> (N, C, 7, 7)
//   nn::MaxPool1d frames(3, {.stride = 2, .padding = 1});   // (N, C, L) -> (N, C, (L + 1) / 2)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/ops/pooling.h"
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

// ---- 1-D: x (N, C, L) or (C, L), over loom::max_pool1d and its kin.

struct MaxPool1dOptions {
  std::optional<int64_t> stride = std::nullopt;  // kernel_size when not given
  int64_t padding = 0;                           // at most half the kernel
  bool ceil_mode = false;
};

struct AvgPool1dOptions {
  std::optional<int64_t> stride = std::nullopt;  // kernel_size when not given
  int64_t padding = 0;                           // at most half the kernel
  bool ceil_mode = false;
  bool count_include_pad = true;  // padding counts in each window's divisor
};

class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(int64_t kernel_size, MaxPool1dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool1d"; }
  std::string extra_repr() const override;

 private:
  Pool1dOptions options_;
};

class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(int64_t kernel_size, AvgPool1dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool1d"; }
  std::string extra_repr() const override;

 private:
  Pool1dOptions options_;
};

// (N, C, L) -> (N, C, output_size), as adaptive_avg_pool1d.
class AdaptiveAvgPool1d : public Module {
 public:
  explicit AdaptiveAvgPool1d(int64_t output_size);
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool1d(x, output_size_); }
  std::string type_name() const override { return "AdaptiveAvgPool1d"; }
  std::string extra_repr() const override { return "output_size=" + std::to_string(output_size_); }

 private:
  int64_t output_size_;
};

// (N, C, L) -> (N, C, output_size), as adaptive_max_pool1d.
class AdaptiveMaxPool1d : public Module {
 public:
  explicit AdaptiveMaxPool1d(int64_t output_size);
  Tensor forward(const Tensor& x) override { return adaptive_max_pool1d(x, output_size_); }
  std::string type_name() const override { return "AdaptiveMaxPool1d"; }
  std::string extra_repr() const override { return "output_size=" + std::to_string(output_size_); }

 private:
  int64_t output_size_;
};

}  // namespace loom::nn
