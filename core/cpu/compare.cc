// File: core/cpu/compare.cc
// Comparison, closeness and selection loops over strided operands.
#include "core/cpu/compare.h"

#include <cstdint>
#include <type_traits>

#include "core/cpu/loop.h"
#include "core/kernel/compare.h"

namespace loom::cpu {

namespace {

// The value a comparison sees: 16-bit floats widen to float, the rest compare
// as they are (int64 stays exact).
template <class T>
auto comparable(T value) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(value);
  } else {
    return value;
  }
}

// Calls fn.template operator()<U>() with an unsigned type of `dtype`'s width:
// selection moves bits and never looks at values.
template <class Fn>
void visit_width(DType dtype, Fn&& fn) {
  switch (element_size(dtype)) {
    case 1: fn.template operator()<uint8_t>(); break;
    case 2: fn.template operator()<uint16_t>(); break;
    case 4: fn.template operator()<uint32_t>(); break;
    default: fn.template operator()<uint64_t>(); break;
  }
}

}  // namespace

void compare(const Strided& out, const Strided& a, const Strided& b, kernel::CompareOp op) {
  visit_dtype(a.dtype, [&]<class T>() {
    bool* y = out.ptr<bool>();
    const T* pa = a.ptr<T>();
    const T* pb = b.ptr<T>();
    for_each_offset<3>(out.sizes, {&out.strides, &a.strides, &b.strides}, [&](const auto& o) {
      y[o[0]] = kernel::math::apply_compare(comparable(pa[o[1]]), comparable(pb[o[2]]), op);
    });
  });
}

void compare_scalar(const Strided& out, const Strided& a, double scalar, kernel::CompareOp op) {
  visit_dtype(a.dtype, [&]<class T>() {
    bool* y = out.ptr<bool>();
    const T* pa = a.ptr<T>();
    for_each_offset<2>(out.sizes, {&out.strides, &a.strides}, [&](const auto& o) {
      y[o[0]] = kernel::math::apply_compare(to_double(pa[o[1]]), scalar, op);
    });
  });
}

void isclose(const Strided& out, const Strided& a, const Strided& b, double rtol, double atol,
             bool equal_nan) {
  visit_dtype(a.dtype, [&]<class T>() {
    using C = kernel::math::close_t<decltype(comparable(T()))>;
    bool* y = out.ptr<bool>();
    const T* pa = a.ptr<T>();
    const T* pb = b.ptr<T>();
    const C r = static_cast<C>(rtol), t = static_cast<C>(atol);
    for_each_offset<3>(out.sizes, {&out.strides, &a.strides, &b.strides}, [&](const auto& o) {
      y[o[0]] = kernel::math::is_close(static_cast<C>(comparable(pa[o[1]])),
                               static_cast<C>(comparable(pb[o[2]])), r, t, equal_nan);
    });
  });
}

void where(const Strided& out, const Strided& cond, const Strided& a, const Strided& b) {
  visit_width(out.dtype, [&]<class U>() {
    U* y = out.ptr<U>();
    const bool* c = cond.ptr<bool>();
    const U* pa = a.ptr<U>();
    const U* pb = b.ptr<U>();
    for_each_offset<4>(out.sizes, {&out.strides, &cond.strides, &a.strides, &b.strides},
                       [&](const auto& o) { y[o[0]] = c[o[1]] ? pa[o[2]] : pb[o[3]]; });
  });
}

}  // namespace loom::cpu
