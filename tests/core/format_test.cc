// File: tests/core/format_test.cc
// operator<< for tensors: exact strings for small float / int / bool tensors,
// nesting, number styles, summarization past 1000 elements, and the trailer
// (shape, dtype, device, layout, autograd state).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

namespace loom {
namespace {

std::string str(const Tensor& t) {
  std::ostringstream out;
  out << t;
  return out.str();
}

TEST_CASE("a 2x2 float32 tensor") {
  CHECK(str(tensor({1, 2, 3, 4}, {2, 2})) ==
        "tensor([[1.0000, 2.0000],\n"
        "        [3.0000, 4.0000]], shape=(2, 2), dtype=float32, device=cpu)");
}

TEST_CASE("integer, unsigned, bool and float16 tensors") {
  CHECK(str(tensor({1, -2, 30}, {3}, {.dtype = DType::Int64})) ==
        "tensor([1, -2, 30], shape=(3,), dtype=int64, device=cpu)");
  CHECK(str(tensor({0, 255}, {2}, {.dtype = DType::UInt8})) ==
        "tensor([0, 255], shape=(2,), dtype=uint8, device=cpu)");
  CHECK(str(tensor({1, 0, 1}, {3}, {.dtype = DType::Bool})) ==
        "tensor([true, false, true], shape=(3,), dtype=bool, device=cpu)");
  CHECK(str(tensor({1.0 / 3.0}, {1}, {.dtype = DType::Float16})) ==
        "tensor([0.3333], shape=(1,), dtype=float16, device=cpu)");
}

TEST_CASE("0-d, empty, 3-D and transposed tensors") {
  CHECK(str(full({}, 2.5, {.dtype = DType::Float64})) ==
        "tensor(2.5000, shape=(), dtype=float64, device=cpu)");
  CHECK(str(empty({0})) == "tensor([], shape=(0,), dtype=float32, device=cpu)");
  CHECK(str(arange(8).view({2, 2, 2})) ==
        "tensor([[[0.0000, 1.0000],\n"
        "         [2.0000, 3.0000]],\n"
        "        [[4.0000, 5.0000],\n"
        "         [6.0000, 7.0000]]], shape=(2, 2, 2), dtype=float32, device=cpu)");
  CHECK(str(tensor({1, 2, 3, 4}, {2, 2}).t()) ==
        "tensor([[1.0000, 3.0000],\n"
        "        [2.0000, 4.0000]], shape=(2, 2), dtype=float32, device=cpu)");
}

TEST_CASE("number styles: scientific for tiny or huge magnitudes; nan and inf") {
  CHECK(str(tensor({1e-5, 1}, {2}, {.dtype = DType::Float64})) ==
        "tensor([1.0000e-05, 1.0000e+00], shape=(2,), dtype=float64, device=cpu)");
  CHECK(str(tensor({123456, -1}, {2}, {.dtype = DType::Float64})) ==
        "tensor([1.2346e+05, -1.0000e+00], shape=(2,), dtype=float64, device=cpu)");
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(str(tensor({std::nan(""), inf, -1.5, 0}, {4})) ==
        "tensor([nan, inf, -1.5000, 0.0000], shape=(4,), dtype=float32, device=cpu)");
}

TEST_CASE("summarization: more than 1000 elements shows 3 items at each edge") {
  CHECK(str(arange(2000)) ==
        "tensor([0.0000, 1.0000, 2.0000, ..., 1997.0000, 1998.0000, 1999.0000], shape=(2000,), "
        "dtype=float32, device=cpu)");
  CHECK(str(arange(2000, {.dtype = DType::Int64}).view({100, 20})) ==
        "tensor([[0, 1, 2, ..., 17, 18, 19],\n"
        "        [20, 21, 22, ..., 37, 38, 39],\n"
        "        [40, 41, 42, ..., 57, 58, 59],\n"
        "        ...,\n"
        "        [1940, 1941, 1942, ..., 1957, 1958, 1959],\n"
        "        [1960, 1961, 1962, ..., 1977, 1978, 1979],\n"
        "        [1980, 1981, 1982, ..., 1997, 1998, 1999]], shape=(100, 20), dtype=int64, "
        "device=cpu)");
  CHECK(str(arange(1000)).find("...") == std::string::npos);  // exactly 1000: printed in full
  CHECK(str(arange(1000)).find("999.0000]") != std::string::npos);
  CHECK(str(arange(1001)).find("2.0000, ..., 998.0000") != std::string::npos);
}

TEST_CASE("trailer: channels_last, requires_grad, grad_fn, undefined") {
  const Tensor cl = tensor({1, 2, 3, 4}, {1, 2, 1, 2}).contiguous(MemoryFormat::ChannelsLast);
  CHECK(str(cl) ==
        "tensor([[[[1.0000, 2.0000]],\n"
        "         [[3.0000, 4.0000]]]], shape=(1, 2, 1, 2), dtype=float32, device=cpu, "
        "channels_last)");
  const Tensor x = tensor({1, 2}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  CHECK(str(x) == "tensor([1.0000, 2.0000], shape=(2,), dtype=float64, device=cpu, requires_grad=true)");
  CHECK(str(mul(x, 2.0)) ==
        "tensor([2.0000, 4.0000], shape=(2,), dtype=float64, device=cpu, grad_fn=mul_scalar)");
  CHECK(str(Tensor()) == "tensor(undefined)");
}

}  // namespace
}  // namespace loom
