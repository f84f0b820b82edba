// File: core/cuda/element.cuh
// How the floating kernels store and compute each dtype: float32 and float64
// compute in themselves; bfloat16 and float16 are stored in 16 bits and are
// loaded into float32, computed and accumulated there, and rounded (to nearest
// even) once when stored, as PyTorch's CUDA kernels do.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/dtype.h"
#include "core/strided.h"

namespace loom::cuda {

// V consecutive elements loaded or stored in one access (16 bytes at most):
// the pointer must be aligned to the pack's size.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Elements of S in one 16-byte pack.
template <class S>
constexpr int kPackOf = static_cast<int>(16 / sizeof(S));

// The pack of V elements at p (p aligned to the pack's size).
template <int V, class T>
__device__ inline Pack<T, V> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}

template <class T, int V>
__device__ inline void store_pack(T* p, const Pack<T, V>& value) {
  *reinterpret_cast<Pack<T, V>*>(p) = value;
}

// True when t's channels (dim 1 of a 4-d operand) move V at a time: unit
// channel stride, a whole number of packs of channels, the other strides whole
// packs, and the base pointer aligned to a pack.
inline bool channel_packs_fit(const Strided& t, int V) {
  const int64_t bytes = V * static_cast<int64_t>(element_size(t.dtype));
  return t.strides[1] == 1 && t.sizes[1] % V == 0 && t.strides[0] % V == 0 &&
         t.strides[2] % V == 0 && t.strides[3] % V == 0 &&
         reinterpret_cast<uintptr_t>(t.data) % bytes == 0;
}

template <class S>
struct ComputeOf {
  using type = S;
};
template <>
struct ComputeOf<__nv_bfloat16> {
  using type = float;
};
template <>
struct ComputeOf<__half> {
  using type = float;
};

// The type a kernel computes in for storage type S.
template <class S>
using compute_t = typename ComputeOf<S>::type;

template <class S>
__device__ inline compute_t<S> to_compute(S value) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return __bfloat162float(value);
  } else if constexpr (std::is_same_v<S, __half>) {
    return __half2float(value);
  } else {
    return value;
  }
}

template <class S>
__device__ inline S from_compute(compute_t<S> value) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return __float2bfloat16_rn(value);
  } else if constexpr (std::is_same_v<S, __half>) {
    return __float2half_rn(value);
  } else {
    return value;
  }
}

// Calls fn.template operator()<S>() with S the device storage type of a
// floating dtype (float, double, __nv_bfloat16, __half): visit_float's twin
// for kernels that also take the 16-bit formats.
template <class Fn>
decltype(auto) visit_floating(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float64: return fn.template operator()<double>();
    case DType::BFloat16: return fn.template operator()<__nv_bfloat16>();
    case DType::Float16: return fn.template operator()<__half>();
    case DType::Float32: return fn.template operator()<float>();
    default: throw_no_kernel("cuda", "float32, float64, bfloat16 or float16", dtype);
  }
}

// visit_floating, also for the integer dtypes arithmetic computes in: the GPU
// twin of visit_arithmetic (whose integer rows it takes, so the list is written
// once), for unary, binary, binary_scalar and add_scaled.
template <class Fn>
decltype(auto) visit_arithmetic_storage(DType dtype, Fn&& fn) {
  if (is_floating(dtype)) return visit_floating(dtype, std::forward<Fn>(fn));
  if (dtype == DType::Bool) throw_no_kernel("cuda", "a float dtype, int32, int64 or uint8", dtype);
  return visit_arithmetic(dtype, std::forward<Fn>(fn));
}

}  // namespace loom::cuda
