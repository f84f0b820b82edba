// File: core/cpu/indexing.cc
// CPU kernels of gather, index_select and embedding, and their scatter-add backward.
#include "core/cpu/indexing.h"

#include "core/cpu/loop.h"

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
  visit_float(src.dtype, [&]<class T>() {
    T* y = out_base.ptr<T>();
    const T* s = src.ptr<T>();
    const int64_t* idx = index.ptr<int64_t>();
    for_each_offset<3>(src.sizes, {&out_base.strides, &index.strides, &src.strides},
                       [&](const auto& o) { y[o[0] + idx[o[1]] * out_dim_stride] += s[o[2]]; });
  });
}

}  // namespace loom::cpu
