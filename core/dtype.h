// File: core/dtype.h
// Element types, with the two 16-bit float formats stored as raw bits and
// converted through float (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

namespace loom {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, UInt8, Bool };

size_t element_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "float32", "int64", ...
bool is_floating(DType dtype);
// The dtype two operands meet in, as torch.promote_types: Bool gives way to
// anything; a floating dtype wins over an integer one; among floating dtypes
// the wider wins and bfloat16 with float16 meet in float32; among integers the
// wider wins (uint8 with int32 -> int32).
DType promote_types(DType a, DType b);

struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float value);
  explicit operator float() const;
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float value);
  explicit operator float() const;
};

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

// Whether T is the C++ type of a DType (dtype_of<T> is defined).
template <class T>
inline constexpr bool has_dtype =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
    std::is_same_v<T, BFloat16> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
    std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>;

// Calls fn.template operator()<T>() with T the C++ type of `dtype`:
//   visit_dtype(t.dtype(), [&]<class T>() { ... });
template <class Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn.template operator()<float>();
    case DType::Float64: return fn.template operator()<double>();
    case DType::Float16: return fn.template operator()<Half>();
    case DType::BFloat16: return fn.template operator()<BFloat16>();
    case DType::Int32: return fn.template operator()<int32_t>();
    case DType::Int64: return fn.template operator()<int64_t>();
    case DType::UInt8: return fn.template operator()<uint8_t>();
    case DType::Bool: return fn.template operator()<bool>();
  }
  __builtin_unreachable();
}

// Throws TypeError: a kernel ("cpu", "cuda") that computes in `dtypes` was
// given `dtype`. Ops refuse such tensors first; the visitors call this so that
// a missed check never reads or writes a buffer as the wrong type.
[[noreturn]] void throw_no_kernel(std::string_view where, std::string_view dtypes, DType dtype);

// Like visit_dtype, for the two dtypes the CPU math kernels compute in.
template <class Fn>
decltype(auto) visit_float(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float64: return fn.template operator()<double>();
    case DType::Float32: return fn.template operator()<float>();
    default: throw_no_kernel("cpu", "float32 or float64", dtype);
  }
}

// Like visit_float, also for the integer dtypes that arithmetic computes in
// (int32, int64, uint8: add, sub, mul, neg, abs wrap around as PyTorch's do).
template <class Fn>
decltype(auto) visit_arithmetic(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float64: return fn.template operator()<double>();
    case DType::Float32: return fn.template operator()<float>();
    case DType::Int32: return fn.template operator()<int32_t>();
    case DType::Int64: return fn.template operator()<int64_t>();
    case DType::UInt8: return fn.template operator()<uint8_t>();
    default: throw_no_kernel("cpu", "float32, float64, int32, int64 or uint8", dtype);
  }
}

// Any element type to and from double, for element access and casts.
template <class T>
double to_double(T value) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(value);
  } else {
    return static_cast<double>(value);
  }
}

template <class T>
T from_double(double value) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, bool>) {
    return value != 0.0;
  } else {
    return static_cast<T>(value);
  }
}

}  // namespace loom
