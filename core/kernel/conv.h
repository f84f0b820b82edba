// File: core/kernel/conv.h
// The geometry of a 2-D convolution (stride, padding, dilation, groups), the
// one struct the functional op, the CPU reference, the CUDA kernels and the
// cuDNN graphs all take.
#pragma once

#include <cstdint>

namespace loom::kernel {

struct ConvParams {
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_h = 0;  // zeros added on both sides
  int64_t pad_w = 0;
  int64_t dilation_h = 1;
  int64_t dilation_w = 1;
  int64_t groups = 1;
};

}  // namespace loom::kernel
