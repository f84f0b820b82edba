// File: tests/core/strided_test.cc
// Strided::ptr<T>: the element type a kernel asks for must be the view's dtype;
// a Bool view read as bytes, null views and types without a dtype pass through.
#include "core/strided.h"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "tests/testing.h"

namespace loom {
namespace {

TEST_CASE("Strided::ptr returns the data for the view's own element type") {
  const Tensor x = arange(0.0, 6.0, 1.0, {.dtype = DType::Float64});
  const Strided view = x.strided();
  CHECK(view.ptr<double>() == x.data_ptr<double>());
  CHECK(view.ptr<const double>()[5] == 5.0);
  const Tensor mask = zeros({3}, {.dtype = DType::Bool});
  CHECK(mask.strided().ptr<bool>() != nullptr);
  const Tensor labels = zeros({4}, {.dtype = DType::Int64});
  CHECK(labels.strided().ptr<const int64_t>() == labels.data_ptr<int64_t>());
}

TEST_CASE("Strided::ptr refuses another Loom element type, naming both") {
  const Tensor labels = zeros({4}, {.dtype = DType::Int64});
  CHECK_THROWS_WITH_FRAGMENT(labels.strided().ptr<float>(), TypeError, "a view of int64 elements was read as float32");
  const Tensor x = ones({2, 2});
  CHECK_THROWS_AS(x.strided().ptr<const double>(), TypeError);
  CHECK_THROWS_AS(x.strided().ptr<uint8_t>(), TypeError);
  CHECK_THROWS_AS(zeros({2}, {.dtype = DType::UInt8}).strided().ptr<bool>(), TypeError);  // 2 is no bool
}

TEST_CASE("Strided::ptr reads a Bool view as bytes, and checks neither a null view nor a type without a dtype") {
  const Tensor mask = ones({3}, {.dtype = DType::Bool});
  CHECK(mask.strided().ptr<const uint8_t>()[2] == 1);
  const Strided absent{};  // an optional operand not given
  CHECK(absent.ptr<int64_t>() == nullptr);
  const Tensor x = ones({2});
  CHECK(static_cast<const void*>(x.strided().ptr<std::byte>()) == x.data_ptr<float>());
}

}  // namespace
}  // namespace loom
