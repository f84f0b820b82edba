// File: core/cpu/indexing.cc
// CPU kernels of gather, index_select and embedding, their scatter-add
// backward, and scatter (a plain write at the indices).
#include "core/cpu/indexing.h"

#include <type_traits>

#include "core/cpu/loop.h"
#include "core/error.h"

namespace loom::cpu {

void gather(const Strided& out, const Strided& in_base, int64_t in_dim_stride,
            const Strided& index) {
  visit_dtype(out.dtype, [&]<class T>() {
    T* y = out.ptr<T>();
    const T* x = in_base.ptr<T>();
    const int64_t* idx = index.ptr<int64_t>();
    for_each_offset<3>(out.sizes, {&out.strides, &in_base.strides, &index.strides},
                       [&](const auto& o) { y[o[0]] = x[o[1] + idx[o[2]] * in_dim_stride]; });
  });
}

void scatter_add(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
                 const Strided& src) {
  auto accumulate = [&]<class T>() {
    T* y = out_base.ptr<T>();
    const T* s = src.ptr<T>();
    const int64_t* idx = index.ptr<int64_t>();
    for_each_offset<3>(src.sizes, {&out_base.strides, &index.strides, &src.strides}, [&](const auto& o) {
      T& target = y[o[0] + idx[o[1]] * out_dim_stride];
      if constexpr (std::is_integral_v<T>) {  // wraps around, as PyTorch's (unsigned: no UB)
        using U = std::make_unsigned_t<T>;
        target = static_cast<T>(static_cast<U>(target) + static_cast<U>(s[o[2]]));
      } else {
        target += s[o[2]];
      }
    });
  };
  switch (src.dtype) {
    case DType::Float32: return accumulate.template operator()<float>();
    case DType::Float64: return accumulate.template operator()<double>();
    case DType::Int32: return accumulate.template operator()<int32_t>();
    case DType::Int64: return accumulate.template operator()<int64_t>();
    default:
      LOOM_CHECK(false, TypeError, "[cpu::scatter_add] dtype {} has no CPU scatter-add", dtype_name(src.dtype));
  }
}

void scatter(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
             const Strided& src) {
  visit_dtype(src.dtype, [&]<class T>() {
    T* y = out_base.ptr<T>();
    const T* s = src.ptr<T>();
    const int64_t* idx = index.ptr<int64_t>();
    for_each_offset<3>(src.sizes, {&out_base.strides, &index.strides, &src.strides},
                       [&](const auto& o) { y[o[0] + idx[o[1]] * out_dim_stride] = s[o[2]]; });
  });
}

}  // namespace loom::cpu
