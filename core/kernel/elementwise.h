// File: core/kernel/elementwise.h
// The elementwise ops (UnaryOp, BinaryOp; the activations are their rows,
// activation.h) and what one element of each computes, written once for both
// backends: core/cpu/elementwise.cc calls it in its loops and
// core/cuda/elementwise.cu in its kernels (nvcc sees __host__ __device__).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "core/kernel/host_device.h"

namespace loom::kernel {

// Round is half to even (torch.round without decimals); Floor, Ceil, Round and
// Trunc leave integers as they are, Sign keeps their dtype (-1, 0, 1; NaN gives
// 0, as PyTorch's); the rest take floating operands only.
enum class UnaryOp {
  Neg, Exp, Log, Sqrt, Abs, Sin, Cos, Floor, Ceil, Round, Trunc,
  Log1p, Expm1, Log2, Log10, Tan, Atan, Erf, Rsqrt, Sign,
};

enum class BinaryOp {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Equal,  // 1 where a == b, else 0 (in the operands' dtype)
  AbsBackward,  // (dy, x) -> dy * sign(x), 0 at x = 0 and NaN (PyTorch's sgn)
  FloorDivide,  // a / b rounded toward -inf (Python's //)
  Remainder,    // a - floor_divide(a, b) * b: the sign of b (Python's %)
};

}  // namespace loom::kernel

namespace loom::kernel::math {

// Integer arithmetic wraps around as PyTorch's does (uint8 255 + 1 is 0, -int64 min
// is itself): computed in the unsigned type of the same width, where overflow is
// defined, and converted back (two's complement). The ops layer sends integers only
// Add, Sub, Mul, Pow (exponent >= 0), Equal, FloorDivide and Remainder, and Neg, Abs,
// Floor, Ceil, Round, Trunc and Sign.
template <class T>
LOOM_HOST_DEVICE T wrap_int(std::make_unsigned_t<T> bits) {
  static_assert(!std::is_same_v<T, bool>, "Bool takes the logical ops");
  return static_cast<T>(bits);
}

template <class T>
LOOM_HOST_DEVICE T integer_power(T base, T exponent) {
  using U = std::make_unsigned_t<T>;
  U result = 1, factor = static_cast<U>(base);
  for (auto e = static_cast<U>(exponent); exponent > T(0) && e != 0; e >>= 1) {
    if (e & 1u) result = static_cast<U>(result * factor);
    factor = static_cast<U>(factor * factor);
  }
  return wrap_int<T>(result);
}

// Python's a // b and a % b on integers. A zero divisor gives 0 for both, as NumPy's
// do: the ops layer refuses it on the CPU, and the GPU cannot check without a host
// sync. The signed type's min // -1 wraps to min (its remainder is 0) instead of
// overflowing, as the other integer ops wrap.
template <class T>
LOOM_HOST_DEVICE T integer_floor_divide(T a, T b) {
  if (b == T(0)) return T(0);
  if constexpr (std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (b == T(-1)) return wrap_int<T>(static_cast<U>(U(0) - static_cast<U>(a)));
    const T quotient = a / b, rest = a % b;  // C++ truncates toward zero
    return rest != T(0) && (rest < T(0)) != (b < T(0)) ? T(quotient - T(1)) : quotient;
  }
  return static_cast<T>(a / b);
}

template <class T>
LOOM_HOST_DEVICE T integer_remainder(T a, T b) {
  if (b == T(0)) return T(0);
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0);
    const T rest = a % b;
    return rest != T(0) && (rest < T(0)) != (b < T(0)) ? T(rest + b) : rest;
  }
  return static_cast<T>(a % b);
}

// PyTorch's floating a // b (div_floor_floating): from the exact remainder fmod(a, b),
// not floor(a / b), whose rounded quotient can land on the next integer (1 // 0.1 is 9).
template <class T>
LOOM_HOST_DEVICE T floating_floor_divide(T a, T b) {
  if (b == T(0)) return a / b;
  const T mod = std::fmod(a, b);
  T quotient = (a - mod) / b;
  if (mod != T(0) && (b < T(0)) != (mod < T(0))) quotient -= T(1);
  if (quotient == T(0)) return std::copysign(T(0), a / b);
  T floored = std::floor(quotient);
  if (quotient - floored > T(0.5)) floored += T(1);
  return floored;
}

// PyTorch's floating a % b: fmod, moved by b where its sign differs from b's.
template <class T>
LOOM_HOST_DEVICE T floating_remainder(T a, T b) {
  const T mod = std::fmod(a, b);
  return mod != T(0) && (b < T(0)) != (mod < T(0)) ? mod + b : mod;
}

template <class T>
LOOM_HOST_DEVICE T apply_integer_binary(T a, T b, BinaryOp op) {
  using U = std::make_unsigned_t<T>;
  const auto ua = static_cast<U>(a), ub = static_cast<U>(b);
  switch (op) {
    case BinaryOp::Add: return wrap_int<T>(static_cast<U>(ua + ub));
    case BinaryOp::Sub: return wrap_int<T>(static_cast<U>(ua - ub));
    case BinaryOp::Mul: return wrap_int<T>(static_cast<U>(ua * ub));
    case BinaryOp::Pow: return integer_power(a, b);
    case BinaryOp::Equal: return a == b ? T(1) : T(0);
    case BinaryOp::FloorDivide: return integer_floor_divide(a, b);
    case BinaryOp::Remainder: return integer_remainder(a, b);
    case BinaryOp::Div:
    case BinaryOp::AbsBackward: break;  // integers divide in float32; no gradients
  }
  return T(0);
}

template <class T>
LOOM_HOST_DEVICE T apply_integer_unary(T x, UnaryOp op) {
  using U = std::make_unsigned_t<T>;
  const auto negated = wrap_int<T>(static_cast<U>(U(0) - static_cast<U>(x)));
  switch (op) {
    case UnaryOp::Neg: return negated;
    case UnaryOp::Abs:
      if constexpr (std::is_signed_v<T>) return x < T(0) ? negated : x;
      return x;
    case UnaryOp::Floor:
    case UnaryOp::Ceil:
    case UnaryOp::Round:
    case UnaryOp::Trunc: return x;  // already whole
    case UnaryOp::Sign:
      if constexpr (std::is_signed_v<T>) return T(T(0) < x) - T(x < T(0));
      return T(T(0) < x);
    default: break;  // integers take the rest in float32
  }
  return x;
}

template <class T>
LOOM_HOST_DEVICE T apply_unary(T x, UnaryOp op) {
  if constexpr (std::is_integral_v<T>) {
    return apply_integer_unary(x, op);
  } else {
    switch (op) {
      case UnaryOp::Neg: return -x;
      case UnaryOp::Exp: return std::exp(x);
      case UnaryOp::Log: return std::log(x);
      case UnaryOp::Sqrt: return std::sqrt(x);
      case UnaryOp::Abs: return std::fabs(x);
      case UnaryOp::Sin: return std::sin(x);
      case UnaryOp::Cos: return std::cos(x);
      case UnaryOp::Floor: return std::floor(x);
      case UnaryOp::Ceil: return std::ceil(x);
      case UnaryOp::Round: return std::nearbyint(x);  // the default rounding mode: half to even
      case UnaryOp::Trunc: return std::trunc(x);
      case UnaryOp::Log1p: return std::log1p(x);
      case UnaryOp::Expm1: return std::expm1(x);
      case UnaryOp::Log2: return std::log2(x);
      case UnaryOp::Log10: return std::log10(x);
      case UnaryOp::Tan: return std::tan(x);
      case UnaryOp::Atan: return std::atan(x);
      case UnaryOp::Erf: return std::erf(x);
      case UnaryOp::Rsqrt: return T(1) / std::sqrt(x);
      case UnaryOp::Sign: return T(T(0) < x) - T(x < T(0));
    }
    return x;
  }
}

template <class T>
LOOM_HOST_DEVICE T apply_binary(T a, T b, BinaryOp op) {
  if constexpr (std::is_integral_v<T>) {
    return apply_integer_binary(a, b, op);
  } else {
    switch (op) {
      case BinaryOp::Add: return a + b;
      case BinaryOp::Sub: return a - b;
      case BinaryOp::Mul: return a * b;
      case BinaryOp::Div: return a / b;
      case BinaryOp::Pow: return std::pow(a, b);
      case BinaryOp::Equal: return a == b ? T(1) : T(0);
      case BinaryOp::AbsBackward: return a * (T(T(0) < b) - T(b < T(0)));
      case BinaryOp::FloorDivide: return floating_floor_divide(a, b);
      case BinaryOp::Remainder: return floating_remainder(a, b);
    }
    return a;
  }
}

// A scalar argument in the operands' type T: an integer one, which the ops layer
// has checked to be whole and within int64, wraps to T's width (uint8 + 300 adds 44).
template <class T>
LOOM_HOST_DEVICE T scalar_as(double value) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(static_cast<int64_t>(value)));
  } else {
    return static_cast<T>(value);
  }
}

// a + alpha * b: autograd's gradient sums and add / sub with alpha.
template <class T>
LOOM_HOST_DEVICE T scaled_sum(T a, T b, T alpha) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return wrap_int<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(static_cast<U>(alpha) * static_cast<U>(b))));
  } else {
    return a + alpha * b;
  }
}

}  // namespace loom::kernel::math
