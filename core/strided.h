// File: core/strided.h
// What a kernel sees of a tensor: a typed base pointer with sizes and strides
// (in elements). Kernels under core/cpu and core/cuda take these, so they do not
// depend on Tensor or autograd.
#pragma once

#include <type_traits>

#include "core/dtype.h"
#include "core/shape.h"

namespace loom {

// TypeError: a view of `actual` elements read as `requested`.
[[noreturn]] void throw_element_mismatch(DType actual, DType requested);

struct Strided {
  void* data = nullptr;  // already offset to the first element
  DType dtype = DType::Float32;
  Shape sizes;
  Shape strides;

  int64_t numel() const { return numel_of(sizes); }
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  // data as T*. A T that names a Loom dtype must be this view's dtype (a
  // kernel reading int64 indices as float would read garbage), except that a
  // Bool view may be read as uint8_t bytes, as the kernels that move bits by
  // element width do. A null view (an absent optional operand) and types
  // without a dtype (the unsigned words of those kernels, CUDA's own 16-bit
  // types) are not checked.
  template <class T>
  T* ptr() const {
    using Element = std::remove_const_t<T>;
    if constexpr (has_dtype<Element>) {
      const bool bytes_of_bools = std::is_same_v<Element, uint8_t> && dtype == DType::Bool;
      if (data != nullptr && dtype != dtype_of<Element>() && !bytes_of_bools) {
        throw_element_mismatch(dtype, dtype_of<Element>());
      }
    }
    return static_cast<T*>(data);
  }
};

}  // namespace loom
