// File: core/cuda/view4.cuh
// A (N, C, rows, cols) device operand with any strides, for kernels that walk
// 4-d windows (small convolutions, pooling) and index by (n, c, h, w) rather
// than by a linear element index (geometry.cuh). Host code builds one with
// view4<T>(strided) and passes it to a kernel by value.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/strided.h"

namespace loom::cuda {

template <class T>
struct View4 {
  T* data;
  int64_t stride_n, stride_c, stride_h, stride_w;

  // The element's address: vectorised kernels load or store a pack of
  // consecutive channels starting there.
  __device__ T* at(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return data + n * stride_n + c * stride_c + h * stride_h + w * stride_w;
  }
  __device__ T& operator()(int64_t n, int64_t c, int64_t h, int64_t w) const { return *at(n, c, h, w); }
};

// t must have 4 dims (the host wrappers check the rank).
template <class T>
View4<T> view4(const Strided& t) {
  return {t.ptr<T>(), t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
}

}  // namespace loom::cuda
