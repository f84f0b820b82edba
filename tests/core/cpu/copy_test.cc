// File: tests/core/cpu/copy_test.cc
// The strided copy and fill kernels on raw buffers: every dtype pair,
// transposed / stepped / broadcast (stride 0) operands, 0-d and empty views.
#include "core/cpu/copy.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "tests/testing.h"

namespace loom {
namespace {

constexpr DType kAllDtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                DType::Int32,   DType::Int64,   DType::UInt8,   DType::Bool};

// A raw buffer of `n` elements of `dtype`, written and read through doubles.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> bytes;

  Buffer(DType d, int64_t n) : dtype(d), bytes(n * element_size(d), 0xAB) {}
  Strided view(const Shape& sizes, const Shape& strides, int64_t offset = 0) {
    return {bytes.data() + offset * element_size(dtype), dtype, sizes, strides};
  }
  void set(int64_t i, double v) {
    visit_dtype(dtype, [&]<class T>() { reinterpret_cast<T*>(bytes.data())[i] = from_double<T>(v); });
  }
  double get(int64_t i) const {
    return visit_dtype(dtype, [&]<class T>() { return to_double(reinterpret_cast<const T*>(bytes.data())[i]); });
  }
  std::vector<double> all() const {
    std::vector<double> out;
    for (int64_t i = 0; i < static_cast<int64_t>(bytes.size() / element_size(dtype)); ++i) out.push_back(get(i));
    return out;
  }
};

Buffer filled(DType dtype, const std::vector<double>& values) {
  Buffer b(dtype, static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) b.set(static_cast<int64_t>(i), values[i]);
  return b;
}

TEST_CASE("copy converts between every pair of dtypes") {
  for (DType from : kAllDtypes) {
    for (DType to : kAllDtypes) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      Buffer src = filled(from, {0, 1, 1, 0, 1});
      Buffer dst(to, 5);
      cpu::copy(dst.view({5}, {1}), src.view({5}, {1}));
      CHECK(dst.all() == std::vector<double>{0, 1, 1, 0, 1});
    }
  }
}

TEST_CASE("copy rounds, truncates and maps to bool as documented") {
  Buffer src = filled(DType::Float64, {1.0 / 3.0, -2.7, 0.25, 70000});
  Buffer half(DType::Float16, 4), ints(DType::Int32, 4), flags(DType::Bool, 4), bf(DType::BFloat16, 4);
  const Strided s = src.view({4}, {1});
  cpu::copy(half.view({4}, {1}), s);
  cpu::copy(ints.view({4}, {1}), s);
  cpu::copy(flags.view({4}, {1}), s);
  cpu::copy(bf.view({4}, {1}), s);
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(half.all() == std::vector<double>{0.333251953125, -2.69921875, 0.25, inf});
  CHECK(ints.all() == std::vector<double>{0, -2, 0, 70000});
  CHECK(flags.all() == std::vector<double>{1, 1, 1, 1});
  CHECK(bf.all() == std::vector<double>{0.333984375, -2.703125, 0.25, 70144});
}

TEST_CASE("copy follows strides on both sides: transposed source, stepped destination") {
  Buffer src = filled(DType::Float32, {0, 1, 2, 3, 4, 5});  // (2, 3) row-major
  Buffer dst(DType::Float64, 6);
  cpu::copy(dst.view({3, 2}, {2, 1}), src.view({3, 2}, {1, 3}));  // the transpose
  CHECK(dst.all() == std::vector<double>{0, 3, 1, 4, 2, 5});
  Buffer gaps = filled(DType::Int64, std::vector<double>(7, -1));
  cpu::copy(gaps.view({3}, {2}, /*offset=*/1), src.view({3}, {2}));  // 0, 2, 4 into slots 1, 3, 5
  CHECK(gaps.all() == std::vector<double>{-1, 0, -1, 2, -1, 4, -1});
}

TEST_CASE("copy broadcasts a stride-0 source, and handles 0-d and empty views") {
  Buffer row = filled(DType::Float32, {7, 8, 9});
  Buffer dst(DType::Float32, 6);
  cpu::copy(dst.view({2, 3}, {3, 1}), row.view({2, 3}, {0, 1}));
  CHECK(dst.all() == std::vector<double>{7, 8, 9, 7, 8, 9});
  Buffer one = filled(DType::Int32, {42});
  Buffer scalar(DType::Float64, 1);
  cpu::copy(scalar.view({}, {}), one.view({}, {}));
  CHECK(scalar.get(0) == 42);
  Buffer untouched = filled(DType::Float32, {5});
  cpu::copy(untouched.view({0, 3}, {3, 1}), row.view({0, 3}, {3, 1}));
  CHECK(untouched.get(0) == 5);
}

TEST_CASE("fill converts the value and writes only the viewed elements") {
  for (DType dtype : kAllDtypes) {
    CAPTURE(dtype_name(dtype));
    Buffer b = filled(dtype, {0, 0, 0, 0, 0, 0});
    cpu::fill(b.view({2, 2}, {3, 1}), 1.0);  // columns 0-1 of a (2, 3)
    CHECK(b.all() == std::vector<double>{1, 1, 0, 1, 1, 0});
  }
  Buffer ints(DType::Int32, 2);
  cpu::fill(ints.view({2}, {1}), -3.9);
  CHECK(ints.all() == std::vector<double>{-3, -3});
  Buffer halves(DType::Float16, 1);
  cpu::fill(halves.view({}, {}), 1.0 / 3.0);
  CHECK(halves.get(0) == 0.333251953125);
  Buffer flags(DType::Bool, 1);
  cpu::fill(flags.view({1}, {1}), 0.1);
  CHECK(flags.get(0) == 1);
}

}  // namespace
}  // namespace loom
