// File: core/dtype.cc
// Dtype sizes, names and promotion, and the 16-bit float conversions.
#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace loom {

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::Float64:
    case DType::Int64: return 8;
    case DType::Float32:
    case DType::Int32: return 4;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::UInt8:
    case DType::Bool: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::Bool: return "bool";
  }
  return "?";
}

void throw_no_kernel(std::string_view where, std::string_view dtypes, DType dtype) {
  throw TypeError(fmt::format("[{}] this kernel takes {}, not {}: convert the tensor first, e.g. x.to(DType::Float32)",
                              where, dtypes, dtype_name(dtype)));
}

bool is_floating(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Float16 ||
         dtype == DType::BFloat16;
}

namespace {

// Rank within the integers (Bool lowest) and within the floating dtypes.
int integer_rank(DType dtype) {
  switch (dtype) {
    case DType::Bool: return 0;
    case DType::UInt8: return 1;
    case DType::Int32: return 2;
    default: return 3;  // Int64
  }
}

}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
  if (!is_floating(a)) return integer_rank(a) > integer_rank(b) ? a : b;
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  return DType::Float32;  // a 16-bit format with float32, or bfloat16 with float16
}

namespace {

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

// IEEE binary16 conversion with round-to-nearest-even, subnormals, inf and NaN.
Half::Half(float value) {
  uint32_t f = float_bits(value);
  uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    bits = static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    return;
  }
  if (abs >= 0x477ff000u) {  // rounds to a value beyond the largest half
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (abs < 0x38800000u) {  // subnormal half: let the FPU do the rounding
    float scaled = bits_float(abs) * 16777216.0f;  // 2^24: one subnormal ulp becomes 1
    bits = static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
    return;
  }
  uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round
  bits = static_cast<uint16_t>(sign | (abs >> 13));
}

Half::operator float() const {
  uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) / 16777216.0f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

BFloat16::BFloat16(float value) {
  uint32_t f = float_bits(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) {  // keep NaN a NaN
    bits = static_cast<uint16_t>((f >> 16) | 0x40u);
    return;
  }
  uint32_t rounding = 0x7fffu + ((f >> 16) & 1u);
  bits = static_cast<uint16_t>((f + rounding) >> 16);
}

BFloat16::operator float() const { return bits_float(static_cast<uint32_t>(bits) << 16); }

}  // namespace loom
