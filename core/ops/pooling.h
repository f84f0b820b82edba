// File: core/ops/pooling.h
// 2-D max and average pooling, as torch.nn.functional's max_pool2d / avg_pool2d
// (and their 1-D forms at the end):
//
//   Tensor y = loom::max_pool2d(x, {.kernel_size = {2, 2}});  // stride = kernel_size
//   Tensor y2 = loom::max_pool2d(x, 2);                        // the same
//   Tensor z = loom::avg_pool2d(x, {.kernel_size = {3, 3}, .stride = {{2, 2}},
//                                   .padding = {1, 1}, .count_include_pad = false});
//
// N batch, C channels, H, W input plane, P, Q output plane.
// x (N, C, H, W) with any strides -> y (N, C, P, Q) in x's layout (channels-last in,
// channels-last out) unless output_format says otherwise, where
//   P = floor((H + 2 pad_h - kernel_h) / stride_h) + 1          (ceil instead with ceil_mode,
// dropping a last window that would start in the right padding), likewise Q.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace loom {

struct Pool2dOptions {
  std::array<int64_t, 2> kernel_size{};                         // (kernel_h, kernel_w), required
  std::optional<std::array<int64_t, 2>> stride = std::nullopt;  // kernel_size, as PyTorch
  std::array<int64_t, 2> padding{0, 0};                         // at most half the kernel
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only: padding counts in the divisor
  // y's memory layout; x's when not given. Contiguous under a channels-last x lets
  // a flatten after the pool be a view: the GPU's max-pool kernel writes (and its
  // backward reads) that layout directly, other paths convert y.
  std::optional<MemoryFormat> output_format = std::nullopt;
};

// Each window's max; the gradient goes to the first max of the window.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options);

struct MaxPool2dResult {
  Tensor values;   // (N, C, P, Q), differentiable
  Tensor indices;  // (N, C, P, Q) int64: flat h * W + w of each max in its input plane
};
MaxPool2dResult max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& options);

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options);

// As torch.nn.functional with ints: a square kernel_size window, stride
// kernel_size unless given (max_pool2d(x, 2) halves H and W).
inline Tensor max_pool2d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride = {},
                         int64_t padding = 0) {
  const int64_t step = stride.value_or(kernel_size);
  return max_pool2d(x, Pool2dOptions{.kernel_size = {kernel_size, kernel_size},
                                     .stride = std::array<int64_t, 2>{step, step},
                                     .padding = {padding, padding}});
}
inline Tensor avg_pool2d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride = {},
                         int64_t padding = 0) {
  const int64_t step = stride.value_or(kernel_size);
  return avg_pool2d(x, Pool2dOptions{.kernel_size = {kernel_size, kernel_size},
                                     .stride = std::array<int64_t, 2>{step, step},
                                     .padding = {padding, padding}});
}

// Pool each whole (H, W) plane: (N, C, H, W) -> (N, C, 1, 1), as adaptive pooling to 1x1.
Tensor global_avg_pool2d(const Tensor& x);

// As torch.nn.functional.adaptive_avg_pool2d: (N, C, H, W) -> (N, C, P, Q) with
// output_size (P, Q); cell (i, j) averages rows floor(i H / P) to ceil((i + 1) H / P)
// and the same for columns. An avg_pool2d where P and Q divide H and W (one
// window and stride), else a composite of slices and means.
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Tensor global_max_pool2d(const Tensor& x);

// As torch.nn.functional.adaptive_max_pool2d (values only), over the same cells
// as adaptive_avg_pool2d; each cell's gradient goes to one of its maxima. A
// max_pool2d where P and Q divide H and W, else a composite of slices and max
// (core/ops/adaptive_pool.cc).
Tensor adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

// ---- 1-D pooling, as torch.nn.functional's max_pool1d, avg_pool1d and the
// adaptive ones: x (N, C, L), or one sample (C, L), pooled along L as the 2-D
// op pools the view (N, C, 1, L), so gradients, devices and dtypes are the 2-D
// op's, and y keeps x's layout. L' = floor((L + 2 padding - kernel_size) /
// stride) + 1 (ceil with ceil_mode, as in 2-D).
//
//   Tensor y = loom::max_pool1d(x, {.kernel_size = 3, .stride = 2, .padding = 1});

struct Pool1dOptions {
  int64_t kernel_size = 0;                         // required
  std::optional<int64_t> stride = std::nullopt;    // kernel_size, as PyTorch
  int64_t padding = 0;                             // at most half the kernel
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool1d only: padding counts in the divisor
};

Tensor max_pool1d(const Tensor& x, const Pool1dOptions& options);
Tensor avg_pool1d(const Tensor& x, const Pool1dOptions& options);

// output_size cells along L, with adaptive_avg_pool2d's cell bounds.
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);
Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size);

}  // namespace loom
