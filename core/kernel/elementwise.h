// File: core/kernel/elementwise.h
// The elementwise ops (UnaryOp, BinaryOp; the activations are their rows,
// activation.h) and what one element of each computes, written once for both
// backends: core/cpu/elementwise.cc calls it in its loops and
// core/cuda/elementwise.cu in its kernels (nvcc sees __host__ __device__).
#pragma once

#include <cmath>
#include <numbers>

#include "core/kernel/host_device.h"

namespace loom::kernel {

enum class UnaryOp { Neg, Exp, Log, Sqrt, Abs };

enum class BinaryOp {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Equal,  // 1 where a == b, else 0 (in the operands' dtype)
  AbsBackward,  // (dy, x) -> dy * sign(x), 0 at x = 0 and NaN (PyTorch's sgn)
};

}  // namespace loom::kernel

namespace loom::kernel::math {

template <class T>
LOOM_HOST_DEVICE T apply_unary(T x, UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Abs: return std::fabs(x);
  }
  return x;
}

template <class T>
LOOM_HOST_DEVICE T apply_binary(T a, T b, BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::Equal: return a == b ? T(1) : T(0);
    case BinaryOp::AbsBackward: return a * (T(T(0) < b) - T(b < T(0)));
  }
  return a;
}

}  // namespace loom::kernel::math
