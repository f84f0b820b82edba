// File: core/kernel/pool.h
// The geometry of a 2-D pooling window (kernel, stride, padding), the one
// struct the pooling op hands to every backend: the CPU reference, the CUDA
// kernels, cuDNN and oneDNN.
#pragma once

#include <cstdint>

namespace loom::kernel {

// Window of output (p, q): rows p*stride_h - pad_h ... + kernel_h, likewise columns.
struct Pool2dParams {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
};

}  // namespace loom::kernel
