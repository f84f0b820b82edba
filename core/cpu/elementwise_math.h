// File: core/cpu/elementwise_math.h
// What one element of each elementwise op computes, written once for both
// backends: core/cpu/elementwise.cc calls it in its loops and
// core/cuda/elementwise.cu in its kernels (nvcc sees __host__ __device__).
#pragma once

#include <cmath>
#include <numbers>

#include "core/cpu/elementwise.h"

#ifndef LOOM_HOST_DEVICE
#ifdef __CUDACC__
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif
#endif

namespace loom::cpu::math {

template <class T>
LOOM_HOST_DEVICE T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <class T>
LOOM_HOST_DEVICE T gelu_cdf(T x) {  // Phi(x), the standard normal CDF
  return T(0.5) * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
}

template <class T>
LOOM_HOST_DEVICE T apply_unary(T x, UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Relu: return x > T(0) || std::isnan(x) ? x : T(0);  // NaN stays NaN
    case UnaryOp::Sigmoid: return sigmoid(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Gelu: return x * gelu_cdf(x);
    case UnaryOp::Silu: return x * sigmoid(x);
  }
  return x;
}

template <class T>
LOOM_HOST_DEVICE T apply_binary(T a, T b, BinaryOp op) {
  constexpr T kInvSqrt2Pi = T(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::Equal: return a == b ? T(1) : T(0);
    case BinaryOp::ReluBackward: return b > T(0) ? a : T(0);
    case BinaryOp::SigmoidBackward: return a * b * (T(1) - b);
    case BinaryOp::TanhBackward: return a * (T(1) - b * b);
    case BinaryOp::GeluBackward: return a * (gelu_cdf(b) + b * kInvSqrt2Pi * std::exp(T(-0.5) * b * b));
    case BinaryOp::SiluBackward: {
      T s = sigmoid(b);
      return a * s * (T(1) + b * (T(1) - s));
    }
  }
  return a;
}

}  // namespace loom::cpu::math
