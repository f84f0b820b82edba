// File: core/kernel/elementwise.h
// What one element of each elementwise op computes, written once for both
// backends: core/cpu/elementwise.cc calls it in its loops and
// core/cuda/elementwise.cu in its kernels (nvcc sees __host__ __device__).
#pragma once

#include <cmath>
#include <numbers>

#include "core/kernel/activation.h"
#include "core/kernel/host_device.h"

namespace loom::kernel {

enum class UnaryOp {
  Neg, Exp, Log, Sqrt, Relu, Sigmoid, Tanh, Gelu, Silu,
  Abs,
};

enum class BinaryOp {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Equal,  // 1 where a == b, else 0 (in the operands' dtype)
  // Activation derivatives: (dy, saved) -> dx. Relu, Sigmoid and Tanh take the
  // forward output y; Gelu and Silu take the forward input x.
  ReluBackward,
  SigmoidBackward,
  TanhBackward,
  GeluBackward,
  SiluBackward,
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
    // The activations are their rows (core/kernel/activation.h), which have no parameter.
    case UnaryOp::Relu: return act::Relu::forward(x, T(0), T(0));
    case UnaryOp::Sigmoid: return act::Sigmoid::forward(x, T(0), T(0));
    case UnaryOp::Tanh: return act::Tanh::forward(x, T(0), T(0));
    case UnaryOp::Gelu: return act::Gelu::forward(x, T(0), T(0));
    case UnaryOp::Silu: return act::Silu::forward(x, T(0), T(0));
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
    case BinaryOp::ReluBackward: return act::Relu::backward(a, b, T(0), T(0));
    case BinaryOp::SigmoidBackward: return act::Sigmoid::backward(a, b, T(0), T(0));
    case BinaryOp::TanhBackward: return act::Tanh::backward(a, b, T(0), T(0));
    case BinaryOp::GeluBackward: return act::Gelu::backward(a, b, T(0), T(0));
    case BinaryOp::SiluBackward: return act::Silu::backward(a, b, T(0), T(0));
    case BinaryOp::AbsBackward: return a * (T(T(0) < b) - T(b < T(0)));
  }
  return a;
}

}  // namespace loom::kernel::math
