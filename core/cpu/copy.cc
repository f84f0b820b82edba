#include "core/cpu/copy.h"

#include <cstring>

#include "core/cpu/loop.h"

namespace loom::cpu {

void copy(const Strided& dst, const Strided& src) {
  visit_dtype(dst.dtype, [&]<class D>() {
    visit_dtype(src.dtype, [&]<class S>() {
      D* out = dst.ptr<D>();
      const S* in = src.ptr<S>();
      for_each_offset<2>(dst.sizes, {&dst.strides, &src.strides}, [&](const auto& o) {
        if constexpr (std::is_same_v<D, S>) {
          out[o[0]] = in[o[1]];
        } else {
          out[o[0]] = from_double<D>(to_double(in[o[1]]));
        }
      });
    });
  });
}

void fill(const Strided& dst, double value) {
  visit_dtype(dst.dtype, [&]<class D>() {
    D* out = dst.ptr<D>();
    const D converted = from_double<D>(value);
    for_each_offset<1>(dst.sizes, {&dst.strides}, [&](const auto& o) { out[o[0]] = converted; });
  });
}

}  // namespace loom::cpu
