// File: core/cpu/activation.cc
// The activation rows over strided operands: a flat loop where every operand
// shares one dense layout, else an offset walk.
#include "core/cpu/activation.h"

#include "core/cpu/loop.h"
#include "core/dtype.h"

namespace loom::cpu {

void activation_forward(const Strided& y, const Strided& x, kernel::ActivationKind kind,
                        const kernel::ActivationParameters& parameters) {
  kernel::visit_activation(kind, [&]<class Row>() {
    visit_float(y.dtype, [&]<class T>() {
      T* out = y.ptr<T>();
      const T* in = x.ptr<T>();
      const T p0 = static_cast<T>(parameters[0]), p1 = static_cast<T>(parameters[1]);
      if (same_dense_layout<1>(y, {&x})) {
        flat_loop(y.numel(), [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) out[i] = Row::forward(in[i], p0, p1);
        });
        return;
      }
      for_each_offset<2>(y.sizes, {&y.strides, &x.strides},
                         [&](const auto& o) { out[o[0]] = Row::forward(in[o[1]], p0, p1); });
    });
  });
}

void add_activation(const Strided& y, const Strided& a, const Strided& b, kernel::ActivationKind kind,
                    const kernel::ActivationParameters& parameters) {
  kernel::visit_activation(kind, [&]<class Row>() {
    visit_float(y.dtype, [&]<class T>() {
      T* out = y.ptr<T>();
      const T* pa = a.ptr<T>();
      const T* pb = b.ptr<T>();
      const T p0 = static_cast<T>(parameters[0]), p1 = static_cast<T>(parameters[1]);
      if (same_dense_layout<2>(y, {&a, &b})) {
        flat_loop(y.numel(), [&](int64_t s, int64_t e) {
          for (int64_t i = s; i < e; ++i) out[i] = Row::forward(static_cast<T>(pa[i] + pb[i]), p0, p1);
        });
        return;
      }
      for_each_offset<3>(y.sizes, {&y.strides, &a.strides, &b.strides}, [&](const auto& o) {
        out[o[0]] = Row::forward(static_cast<T>(pa[o[1]] + pb[o[2]]), p0, p1);
      });
    });
  });
}

void activation_backward(const Strided& dx, const Strided& dy, const Strided& saved,
                         kernel::ActivationKind kind, const kernel::ActivationParameters& parameters) {
  kernel::visit_activation(kind, [&]<class Row>() {
    visit_float(dx.dtype, [&]<class T>() {
      T* out = dx.ptr<T>();
      const T* g = dy.ptr<T>();
      const T* s = saved.ptr<T>();
      const T p0 = static_cast<T>(parameters[0]), p1 = static_cast<T>(parameters[1]);
      if (same_dense_layout<2>(dx, {&dy, &saved})) {
        flat_loop(dx.numel(), [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) out[i] = Row::backward(g[i], s[i], p0, p1);
        });
        return;
      }
      for_each_offset<3>(dx.sizes, {&dx.strides, &dy.strides, &saved.strides},
                         [&](const auto& o) { out[o[0]] = Row::backward(g[o[1]], s[o[2]], p0, p1); });
    });
  });
}

}  // namespace loom::cpu
