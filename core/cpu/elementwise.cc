// File: core/cpu/elementwise.cc
// Elementwise loops: a flat, parallel, vectorisable loop when every operand
// shares one dense layout (the common case), the strided odometer otherwise.
#include "core/cpu/elementwise.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/cpu/loop.h"
#include "core/kernel/elementwise.h"
#include "core/parallel.h"

namespace loom::cpu {

using kernel::math::apply_binary;
using kernel::math::apply_unary;

namespace {

// Calls fn.template operator()<kOp>() with op as a compile-time constant, so
// the per-element switch folds away and the loop can vectorize.
template <class Fn>
void with_unary_op(kernel::UnaryOp op, Fn&& fn) {
  switch (op) {
    case kernel::UnaryOp::Neg: return fn.template operator()<kernel::UnaryOp::Neg>();
    case kernel::UnaryOp::Exp: return fn.template operator()<kernel::UnaryOp::Exp>();
    case kernel::UnaryOp::Log: return fn.template operator()<kernel::UnaryOp::Log>();
    case kernel::UnaryOp::Sqrt: return fn.template operator()<kernel::UnaryOp::Sqrt>();
    case kernel::UnaryOp::Abs: return fn.template operator()<kernel::UnaryOp::Abs>();
    case kernel::UnaryOp::Sin: return fn.template operator()<kernel::UnaryOp::Sin>();
    case kernel::UnaryOp::Cos: return fn.template operator()<kernel::UnaryOp::Cos>();
    case kernel::UnaryOp::Floor: return fn.template operator()<kernel::UnaryOp::Floor>();
    case kernel::UnaryOp::Ceil: return fn.template operator()<kernel::UnaryOp::Ceil>();
    case kernel::UnaryOp::Round: return fn.template operator()<kernel::UnaryOp::Round>();
    case kernel::UnaryOp::Trunc: return fn.template operator()<kernel::UnaryOp::Trunc>();
    case kernel::UnaryOp::Log1p: return fn.template operator()<kernel::UnaryOp::Log1p>();
    case kernel::UnaryOp::Expm1: return fn.template operator()<kernel::UnaryOp::Expm1>();
    case kernel::UnaryOp::Log2: return fn.template operator()<kernel::UnaryOp::Log2>();
    case kernel::UnaryOp::Log10: return fn.template operator()<kernel::UnaryOp::Log10>();
    case kernel::UnaryOp::Tan: return fn.template operator()<kernel::UnaryOp::Tan>();
    case kernel::UnaryOp::Atan: return fn.template operator()<kernel::UnaryOp::Atan>();
    case kernel::UnaryOp::Erf: return fn.template operator()<kernel::UnaryOp::Erf>();
    case kernel::UnaryOp::Rsqrt: return fn.template operator()<kernel::UnaryOp::Rsqrt>();
    case kernel::UnaryOp::Sign: return fn.template operator()<kernel::UnaryOp::Sign>();
  }
}

template <class Fn>
void with_binary_op(kernel::BinaryOp op, Fn&& fn) {
  switch (op) {
    case kernel::BinaryOp::Add: return fn.template operator()<kernel::BinaryOp::Add>();
    case kernel::BinaryOp::Sub: return fn.template operator()<kernel::BinaryOp::Sub>();
    case kernel::BinaryOp::Mul: return fn.template operator()<kernel::BinaryOp::Mul>();
    case kernel::BinaryOp::Div: return fn.template operator()<kernel::BinaryOp::Div>();
    case kernel::BinaryOp::Pow: return fn.template operator()<kernel::BinaryOp::Pow>();
    case kernel::BinaryOp::Equal: return fn.template operator()<kernel::BinaryOp::Equal>();
    case kernel::BinaryOp::AbsBackward: return fn.template operator()<kernel::BinaryOp::AbsBackward>();
    case kernel::BinaryOp::FloorDivide: return fn.template operator()<kernel::BinaryOp::FloorDivide>();
    case kernel::BinaryOp::Remainder: return fn.template operator()<kernel::BinaryOp::Remainder>();
  }
}

}  // namespace

void unary(const Strided& out, const Strided& in, kernel::UnaryOp op) {
  visit_arithmetic(out.dtype, [&]<class T>() {
    T* y = out.ptr<T>();
    const T* x = in.ptr<T>();
    if (same_dense_layout<1>(out, {&in})) {
      with_unary_op(op, [&]<kernel::UnaryOp kOp>() {
        flat_loop(out.numel(), [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) y[i] = apply_unary(x[i], kOp);
        });
      });
      return;
    }
    for_each_offset<2>(out.sizes, {&out.strides, &in.strides}, [&](const auto& o) {
      T v = x[o[1]];
      y[o[0]] = apply_unary(v, op);
    });
  });
}

void binary(const Strided& out, const Strided& a, const Strided& b, kernel::BinaryOp op) {
  visit_arithmetic(out.dtype, [&]<class T>() {
    T* y = out.ptr<T>();
    const T* pa = a.ptr<T>();
    const T* pb = b.ptr<T>();
    if (same_dense_layout<2>(out, {&a, &b})) {
      with_binary_op(op, [&]<kernel::BinaryOp kOp>() {
        flat_loop(out.numel(), [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) y[i] = apply_binary(pa[i], pb[i], kOp);
        });
      });
      return;
    }
    for_each_offset<3>(out.sizes, {&out.strides, &a.strides, &b.strides}, [&](const auto& o) {
      y[o[0]] = apply_binary(pa[o[1]], pb[o[2]], op);
    });
  });
}

void binary_scalar(const Strided& out, const Strided& a, double scalar, kernel::BinaryOp op,
                   bool scalar_first) {
  visit_arithmetic(out.dtype, [&]<class T>() {
    T* y = out.ptr<T>();
    const T* pa = a.ptr<T>();
    const T s = kernel::math::scalar_as<T>(scalar);
    if (same_dense_layout<1>(out, {&a})) {
      with_binary_op(op, [&]<kernel::BinaryOp kOp>() {
        flat_loop(out.numel(), [&](int64_t begin, int64_t end) {
          if (scalar_first) {
            for (int64_t i = begin; i < end; ++i) y[i] = apply_binary(s, pa[i], kOp);
          } else {
            for (int64_t i = begin; i < end; ++i) y[i] = apply_binary(pa[i], s, kOp);
          }
        });
      });
      return;
    }
    for_each_offset<2>(out.sizes, {&out.strides, &a.strides}, [&](const auto& o) {
      y[o[0]] = scalar_first ? apply_binary(s, pa[o[1]], op) : apply_binary(pa[o[1]], s, op);
    });
  });
}

bool has_zero(const Strided& x) {
  bool found = false;
  visit_arithmetic(x.dtype, [&]<class T>() {
    const T* p = x.ptr<T>();
    for_each_offset<1>(x.sizes, {&x.strides}, [&](const auto& o) { found = found || p[o[0]] == T(0); });
  });
  return found;
}

void add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha) {
  visit_arithmetic(out.dtype, [&]<class T>() {
    T* y = out.ptr<T>();
    const T* pa = a.ptr<T>();
    const T* pb = b.ptr<T>();
    const T scale = kernel::math::scalar_as<T>(alpha);
    if (same_dense_layout<2>(out, {&a, &b})) {
      flat_loop(out.numel(), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) y[i] = kernel::math::scaled_sum(pa[i], pb[i], scale);
      });
      return;
    }
    for_each_offset<3>(out.sizes, {&out.strides, &a.strides, &b.strides}, [&](const auto& o) {
      y[o[0]] = kernel::math::scaled_sum(pa[o[1]], pb[o[2]], scale);
    });
  });
}

void clamp(const Strided& out, const Strided& in, double lo, double hi) {
  visit_float(out.dtype, [&]<class T>() {
    T* y = out.ptr<T>();
    const T* x = in.ptr<T>();
    for_each_offset<2>(out.sizes, {&out.strides, &in.strides}, [&](const auto& o) {
      T v = x[o[1]];
      y[o[0]] = std::isnan(v) ? v : std::min(std::max(v, static_cast<T>(lo)), static_cast<T>(hi));
    });
  });
}

void clamp_backward(const Strided& dx, const Strided& dy, const Strided& x, double lo, double hi) {
  visit_float(dx.dtype, [&]<class T>() {
    T* g = dx.ptr<T>();
    const T* pdy = dy.ptr<T>();
    const T* px = x.ptr<T>();
    for_each_offset<3>(dx.sizes, {&dx.strides, &dy.strides, &x.strides}, [&](const auto& o) {
      T v = px[o[2]];
      g[o[0]] = v >= static_cast<T>(lo) && v <= static_cast<T>(hi) ? pdy[o[1]] : T(0);
    });
  });
}

void pow_backward(const Strided& da, const Strided& db, const Strided& dy, const Strided& a,
                  const Strided& b, const Strided& out) {
  visit_float(da.dtype, [&]<class T>() {
    T* pda = da.ptr<T>();
    T* pdb = db.ptr<T>();
    const T *pdy = dy.ptr<T>(), *pa = a.ptr<T>(), *pb = b.ptr<T>(), *po = out.ptr<T>();
    for_each_offset<6>(da.sizes, {&da.strides, &db.strides, &dy.strides, &a.strides, &b.strides, &out.strides},
                       [&](const auto& o) {
                         T g = pdy[o[2]], base = pa[o[3]], e = pb[o[4]];
                         pda[o[0]] = e == T(0) ? T(0) : g * e * std::pow(base, e - T(1));
                         pdb[o[1]] = base == T(0) && e >= T(0) ? T(0) : g * po[o[5]] * std::log(base);
                       });
  });
}

}  // namespace loom::cpu
