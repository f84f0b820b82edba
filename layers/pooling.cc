// File: layers/pooling.cc
// N batch, C channels, H, W input.
#include "layers/pooling.h"

#include <fmt/format.h>

#include <string_view>

#include "core/error.h"
#include "core/ops/pooling.h"
#include "layers/repr.h"

namespace loom::nn {

namespace {

// What PyTorch checks when the layer is built, so a bad model fails at
// construction rather than at its first batch.
void check_window(std::string_view layer, Size2 kernel, Size2 stride, Size2 padding) {
  LOOM_CHECK(kernel.h > 0 && kernel.w > 0, ValueError, "[{}] kernel_size must be positive, got {}",
             layer, kernel.pair_str());
  LOOM_CHECK(stride.h > 0 && stride.w > 0, ValueError, "[{}] stride must be positive, got {}",
             layer, stride.pair_str());
  LOOM_CHECK(
      padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w,
      ValueError, "[{}] padding {} must be non-negative and at most half of kernel_size {}", layer,
      padding.pair_str(), kernel.pair_str());
}

// check_window's 1-D form, in 1-D terms.
Pool1dOptions checked_window_1d(std::string_view layer, int64_t kernel, std::optional<int64_t> stride,
                                int64_t padding) {
  const Pool1dOptions o{.kernel_size = kernel, .stride = stride.value_or(kernel), .padding = padding};
  LOOM_CHECK(kernel > 0 && *o.stride > 0, ValueError, "[{}] kernel_size and stride must be positive, got {} and {}",
             layer, kernel, *o.stride);
  LOOM_CHECK(padding >= 0 && 2 * padding <= kernel, ValueError,
             "[{}] padding {} must be non-negative and at most half of kernel_size {}", layer, padding, kernel);
  return o;
}

void check_output_size(std::string_view layer, int64_t output_size) {
  LOOM_CHECK(output_size > 0, ValueError, "[{}] output_size must be positive, got {}", layer, output_size);
}

}  // namespace

MaxPool2d::MaxPool2d(Size2 kernel_size, MaxPool2dOptions options)
    : kernel_size_(kernel_size), stride_(options.stride.value_or(kernel_size)), options_(options) {
  check_window("MaxPool2d", kernel_size_, stride_, options_.padding);
  LOOM_CHECK(options_.output_format != MemoryFormat::Preserve, ValueError,
             "[MaxPool2d] output_format must be contiguous or channels_last, got preserve; leave it "
             "unset to keep the input's layout");
}

Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, {.kernel_size = kernel_size_.array(),
                        .stride = stride_.array(),
                        .padding = options_.padding.array(),
                        .ceil_mode = options_.ceil_mode,
                        .output_format = options_.output_format});
}

// PyTorch's repr, plus the output layout where one is set.
std::string MaxPool2d::extra_repr() const {
  std::string repr = fmt::format("kernel_size={}, stride={}, padding={}, dilation=1, ceil_mode={}",
                                 kernel_size_.str(), stride_.str(), options_.padding.str(),
                                 python_bool(options_.ceil_mode));
  if (options_.output_format) repr += fmt::format(", output_format={}", memory_format_name(*options_.output_format));
  return repr;
}

AvgPool2d::AvgPool2d(Size2 kernel_size, AvgPool2dOptions options)
    : kernel_size_(kernel_size), stride_(options.stride.value_or(kernel_size)), options_(options) {
  check_window("AvgPool2d", kernel_size_, stride_, options_.padding);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, {.kernel_size = kernel_size_.array(),
                        .stride = stride_.array(),
                        .padding = options_.padding.array(),
                        .ceil_mode = options_.ceil_mode,
                        .count_include_pad = options_.count_include_pad});
}

std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", kernel_size_.str(), stride_.str(),
                     options_.padding.str());
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {
  LOOM_CHECK(output_size.h > 0 && output_size.w > 0, ValueError,
             "[AdaptiveAvgPool2d] output_size must be positive, got {}", output_size.pair_str());
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  if (output_size_ == Size2(1)) return global_avg_pool2d(x);
  return adaptive_avg_pool2d(x, output_size_.array());
}

AdaptiveMaxPool2d::AdaptiveMaxPool2d(Size2 output_size) : output_size_(output_size) {
  LOOM_CHECK(output_size.h > 0 && output_size.w > 0, ValueError,
             "[AdaptiveMaxPool2d] output_size must be positive, got {}", output_size.pair_str());
}

Tensor AdaptiveMaxPool2d::forward(const Tensor& x) {
  if (output_size_ == Size2(1)) return global_max_pool2d(x);
  return adaptive_max_pool2d(x, output_size_.array());
}

MaxPool1d::MaxPool1d(int64_t kernel_size, MaxPool1dOptions options)
    : options_(checked_window_1d("MaxPool1d", kernel_size, options.stride, options.padding)) {
  options_.ceil_mode = options.ceil_mode;
}

Tensor MaxPool1d::forward(const Tensor& x) { return max_pool1d(x, options_); }

// PyTorch keeps MaxPool1d's arguments as given (ints), AvgPool1d's as 1-tuples.
std::string MaxPool1d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation=1, ceil_mode={}", options_.kernel_size,
                     *options_.stride, options_.padding, python_bool(options_.ceil_mode));
}

AvgPool1d::AvgPool1d(int64_t kernel_size, AvgPool1dOptions options)
    : options_(checked_window_1d("AvgPool1d", kernel_size, options.stride, options.padding)) {
  options_.ceil_mode = options.ceil_mode;
  options_.count_include_pad = options.count_include_pad;
}

Tensor AvgPool1d::forward(const Tensor& x) { return avg_pool1d(x, options_); }

std::string AvgPool1d::extra_repr() const {
  return fmt::format("kernel_size=({},), stride=({},), padding=({},)", options_.kernel_size, *options_.stride,
                     options_.padding);
}

AdaptiveAvgPool1d::AdaptiveAvgPool1d(int64_t output_size) : output_size_(output_size) {
  check_output_size("AdaptiveAvgPool1d", output_size);
}

AdaptiveMaxPool1d::AdaptiveMaxPool1d(int64_t output_size) : output_size_(output_size) {
  check_output_size("AdaptiveMaxPool1d", output_size);
}

}  // namespace loom::nn
