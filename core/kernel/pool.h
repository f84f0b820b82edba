// File: core/kernel/pool.h
// A 2-D pooling: its window (kernel, stride, padding) and what the window
// computes (max or average, and the average's divisor). The one struct the
// pooling op hands to every backend: the CPU reference, the CUDA kernels,
// cuDNN and oneDNN.
#pragma once

#include <cstdint>

namespace loom::kernel {

// Window of output (p, q): rows p*stride_h - pad_h ... + kernel_h, likewise columns.
struct Pool2dParams {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  // The max_pool2d_* and avg_pool2d_* kernels are named for their kind and do
  // not read `max`; cuDNN's and oneDNN's single entry points do.
  bool max = true;
  bool count_include_pad = true;  // average: padding counts in each window's divisor
};

}  // namespace loom::kernel
