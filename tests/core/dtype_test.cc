// File: tests/core/dtype_test.cc
// Element types: sizes and names, and the float16 / bfloat16 conversions bit by
// bit (round to nearest even, subnormals, overflow, inf and NaN).
#include "core/dtype.h"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"
#include "tests/testing.h"

namespace loom {
namespace {

constexpr DType kAllDtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                DType::Int32,   DType::Int64,   DType::UInt8,   DType::Bool};

float half_value(uint16_t bits) {
  Half h;
  h.bits = bits;
  return static_cast<float>(h);
}

float bf16_value(uint16_t bits) {
  BFloat16 b;
  b.bits = bits;
  return static_cast<float>(b);
}

bool is_half_nan(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0; }
bool is_bf16_nan(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0; }

TEST_CASE("element sizes, names and floating-ness of every dtype") {
  const size_t sizes[] = {4, 8, 2, 2, 4, 8, 1, 1};
  const char* names[] = {"float32", "float64", "float16", "bfloat16",
                         "int32",   "int64",   "uint8",   "bool"};
  const bool floating[] = {true, true, true, true, false, false, false, false};
  for (size_t i = 0; i < std::size(kAllDtypes); ++i) {
    CAPTURE(i);
    CHECK(element_size(kAllDtypes[i]) == sizes[i]);
    CHECK(dtype_name(kAllDtypes[i]) == names[i]);
    CHECK(is_floating(kAllDtypes[i]) == floating[i]);
  }
}

TEST_CASE("visit_dtype hands the matching C++ type to the callback") {
  for (DType dtype : kAllDtypes) {
    CAPTURE(dtype_name(dtype));
    DType seen = visit_dtype(dtype, [&]<class T>() { return dtype_of<T>(); });
    CHECK(seen == dtype);
    CHECK(visit_dtype(dtype, [&]<class T>() { return sizeof(T); }) == element_size(dtype));
  }
  CHECK(visit_float(DType::Float64, [&]<class T>() { return sizeof(T); }) == 8);
  CHECK(visit_float(DType::Float32, [&]<class T>() { return sizeof(T); }) == 4);
}

TEST_CASE("visit_float and visit_arithmetic hand only their own dtypes on, and refuse the rest") {
  const auto size = [&]<class T>() { return sizeof(T); };
  for (DType dtype : kAllDtypes) {
    CAPTURE(dtype_name(dtype));
    const bool real = dtype == DType::Float32 || dtype == DType::Float64;
    const bool arithmetic = real || dtype == DType::Int32 || dtype == DType::Int64 || dtype == DType::UInt8;
    if (real) {
      CHECK(visit_float(dtype, size) == element_size(dtype));
    } else {
      const std::string message = "takes float32 or float64, not " + std::string(dtype_name(dtype));
      CHECK_THROWS_WITH_AS(visit_float(dtype, size), doctest::Contains(message.c_str()), TypeError);
    }
    if (arithmetic) {
      CHECK(visit_arithmetic(dtype, size) == element_size(dtype));
    } else {
      CHECK_THROWS_AS(visit_arithmetic(dtype, size), TypeError);
    }
  }
}

TEST_CASE("float16: exact values and round to nearest even in the normal range") {
  CHECK(Half(1.0f).bits == 0x3c00);
  CHECK(Half(-2.0f).bits == 0xc000);
  CHECK(Half(-0.0f).bits == 0x8000);
  CHECK(Half(65504.0f).bits == 0x7bff);  // the largest half
  // 1/3 = 1.0101..b x 2^-2; 10 mantissa bits keep 0x155, the rest (0.33 ulp) rounds down.
  CHECK(Half(1.0f / 3.0f).bits == 0x3555);
  CHECK(static_cast<float>(Half(1.0f / 3.0f)) == 0.333251953125f);
  CHECK(Half(0.1f).bits == 0x2e66);  // 0.0999755859375
  // Ties (exactly half an ulp = 2^-11 above 1) go to the even mantissa.
  CHECK(Half(1.0f + 0x1p-11f).bits == 0x3c00);
  CHECK(Half(1.0f + 3 * 0x1p-11f).bits == 0x3c02);
  CHECK(Half(1.0f + 0x1p-11f + 0x1p-20f).bits == 0x3c01);  // just above the tie
  CHECK(Half(1.0f + 0x1p-11f - 0x1p-20f).bits == 0x3c00);  // just below it
}

TEST_CASE("float16: overflow goes to inf; inf and NaN are preserved") {
  CHECK(Half(70000.0f).bits == 0x7c00);
  CHECK(Half(-70000.0f).bits == 0xfc00);
  CHECK(std::isinf(static_cast<float>(Half(70000.0f))));
  CHECK(Half(65519.0f).bits == 0x7bff);  // below the midpoint 65520: rounds down to 65504
  CHECK(Half(65520.0f).bits == 0x7c00);  // the midpoint ties to even, which is inf
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(Half(inf).bits == 0x7c00);
  CHECK(Half(-inf).bits == 0xfc00);
  CHECK(static_cast<float>(Half(-inf)) == -inf);
  CHECK(is_half_nan(Half(std::numeric_limits<float>::quiet_NaN()).bits));
  CHECK(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(half_value(0x7e00)));
}

TEST_CASE("float16: subnormals round correctly, including into the normal range") {
  // 1e-7 = 1.68 subnormal ulps (ulp 2^-24): rounds to 2 ulps.
  CHECK(Half(1e-7f).bits == 0x0002);
  CHECK(static_cast<float>(Half(1e-7f)) == 1.1920928955078125e-07f);
  CHECK(Half(0x1p-24f).bits == 0x0001);  // the smallest subnormal
  CHECK(Half(0x1p-25f).bits == 0x0000);  // half an ulp: ties to even (0)
  CHECK(Half(3 * 0x1p-25f).bits == 0x0002);  // 1.5 ulps: ties to even (2)
  CHECK(Half(-3 * 0x1p-25f).bits == 0x8002);
  CHECK(Half(0x1p-14f).bits == 0x0400);  // the smallest normal
  CHECK(Half(0x1p-14f - 0x1p-25f).bits == 0x0400);  // 1023.5 ulps round up into the normals
  CHECK(half_value(0x0001) == 0x1p-24f);
  CHECK(half_value(0x03ff) == 1023 * 0x1p-24f);
  CHECK(half_value(0x8001) == -0x1p-24f);
  CHECK(Half(1e-9f).bits == 0x0000);  // underflows to zero
}

TEST_CASE("float16: every non-NaN bit pattern survives a round trip through float") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    auto h = static_cast<uint16_t>(bits);
    if (is_half_nan(h)) {
      CHECK(std::isnan(half_value(h)));
      continue;
    }
    if (Half(half_value(h)).bits != h) FAIL_CHECK("bits 0x" << std::hex << bits);
  }
}

TEST_CASE("bfloat16: round to nearest even, inf and NaN") {
  CHECK(BFloat16(1.0f).bits == 0x3f80);
  // 1.00390625 = 1 + 2^-8 is exactly half a bfloat16 ulp: ties to even, 1.0.
  CHECK(BFloat16(1.00390625f).bits == 0x3f80);
  CHECK(static_cast<float>(BFloat16(1.00390625f)) == 1.0f);
  // 1 + 3 * 2^-8 ties between mantissas 1 and 2: goes up to the even one.
  CHECK(BFloat16(1.01171875f).bits == 0x3f82);
  CHECK(BFloat16(1.00390625f + 0x1p-20f).bits == 0x3f81);
  // 1/3 = 0x3eaaaaab: the dropped half 0xaaab is above the midpoint, so round up.
  CHECK(BFloat16(1.0f / 3.0f).bits == 0x3eab);
  CHECK(static_cast<float>(BFloat16(1.0f / 3.0f)) == 0.333984375f);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(BFloat16(inf).bits == 0x7f80);
  CHECK(BFloat16(-inf).bits == 0xff80);
  CHECK(BFloat16(std::numeric_limits<float>::max()).bits == 0x7f80);  // past the last midpoint
  CHECK(is_bf16_nan(BFloat16(std::numeric_limits<float>::quiet_NaN()).bits));
  // A NaN whose payload lives only in the low 16 bits must not become inf.
  CHECK(is_bf16_nan(BFloat16(std::bit_cast<float>(0x7f800001u)).bits));
  CHECK(bf16_value(0xc040) == -3.0f);
}

TEST_CASE("bfloat16: every non-NaN bit pattern survives a round trip through float") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    auto b = static_cast<uint16_t>(bits);
    if (is_bf16_nan(b)) continue;
    if (BFloat16(bf16_value(b)).bits != b) FAIL_CHECK("bits 0x" << std::hex << bits);
  }
}

TEST_CASE("to_double / from_double convert like a C++ cast, bool as != 0") {
  CHECK(from_double<int32_t>(-2.7) == -2);
  CHECK(from_double<int64_t>(2.7) == 2);
  CHECK(from_double<uint8_t>(255.0) == 255);
  CHECK(from_double<bool>(0.5) == true);
  CHECK(from_double<bool>(0.0) == false);
  CHECK(from_double<Half>(1.0 / 3.0).bits == 0x3555);
  CHECK(from_double<BFloat16>(-1.0).bits == 0xbf80);
  CHECK(to_double(true) == 1.0);
  CHECK(to_double(static_cast<uint8_t>(200)) == 200.0);
  CHECK(to_double(Half(0.5f)) == 0.5);
  CHECK(to_double(BFloat16(1.00390625f)) == 1.0);
}

}  // namespace
}  // namespace loom
