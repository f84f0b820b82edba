// File: core/cuda/visit.cuh
// Dispatch from a runtime dtype to a kernel's template parameter, for the
// kernels that take every dtype. Each calls fn.template operator()<T>():
//
//   visit_device_dtype(t.dtype, [&]<class S>() { my_kernel<<<...>>>(t.data<S>(), ...); });
//
// (visit_floating in element.cuh is the one for floating dtypes only.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace loom::cuda {

// T is the dtype's device storage type: the device-side twin of loom::visit_dtype.
template <class Fn>
void visit_device_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: fn.template operator()<float>(); break;
    case DType::Float64: fn.template operator()<double>(); break;
    case DType::Float16: fn.template operator()<__half>(); break;
    case DType::BFloat16: fn.template operator()<__nv_bfloat16>(); break;
    case DType::Int32: fn.template operator()<int32_t>(); break;
    case DType::Int64: fn.template operator()<int64_t>(); break;
    case DType::UInt8: fn.template operator()<uint8_t>(); break;
    case DType::Bool: fn.template operator()<bool>(); break;
  }
}

// T is an unsigned type of the dtype's width, for kernels that move bits and
// never look at values (selection, gather), so one instantiation serves every
// dtype of that width.
template <class Fn>
void visit_width(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::UInt8:
    case DType::Bool: fn.template operator()<uint8_t>(); break;
    case DType::Float16:
    case DType::BFloat16: fn.template operator()<uint16_t>(); break;
    case DType::Float32:
    case DType::Int32: fn.template operator()<uint32_t>(); break;
    case DType::Float64:
    case DType::Int64: fn.template operator()<uint64_t>(); break;
  }
}

}  // namespace loom::cuda
