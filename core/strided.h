// File: core/strided.h
// What a kernel sees of a tensor: a typed base pointer with sizes and strides
// (in elements). Kernels under core/cpu and core/cuda take these, so they do not
// depend on Tensor or autograd.
#pragma once

#include "core/dtype.h"
#include "core/shape.h"

namespace loom {

struct Strided {
  void* data = nullptr;  // already offset to the first element
  DType dtype = DType::Float32;
  Shape sizes;
  Shape strides;

  int64_t numel() const { return numel_of(sizes); }
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  template <class T>
  T* ptr() const { return static_cast<T*>(data); }
};

}  // namespace loom
