// File: tests/core/ops/pad_test.cc
// pad against PyTorch's own results (resize_golden.h: constant with a value,
// negative pads, channel pads, reflect and replicate including crops), in
// float64, float32 and channels-last; float64 gradcheck of every mode;
// integer and Bool inputs; argument errors.
#include "core/ops/pad.h"

#include <doctest/doctest.h>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "tests/core/ops/resize_golden.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

Tensor golden_values(const Shape& sizes, DType dtype, int64_t mul, int64_t mod, int64_t shift) {
  std::vector<double> v(numel_of(sizes));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * mul) % mod) - shift;
  return tensor(v, sizes, {.dtype = dtype});
}

void check_golden(const golden::PadCase& c, DType dtype, MemoryFormat format) {
  CAPTURE(c.name);
  CAPTURE(dtype_name(dtype));
  CAPTURE(memory_format_name(format));
  Tensor x = golden_values(c.x_sizes, dtype, 37, 11, 5);  // x[i] = (i * 37) % 11 - 5
  if (x.dim() == 4) x = x.contiguous(format);
  x.requires_grad_(true);
  Tensor y = pad(x, c.pads, c.mode, c.value);
  CHECK(y.sizes() == c.y_sizes);
  if (x.dim() == 4) CHECK(y.is_contiguous(format));
  CHECK_CLOSE(y, tensor(c.y, c.y_sizes, kF64).to(dtype), 0, 0);
  y.backward(golden_values(c.y_sizes, dtype, 1, 5, 2));  // g[j] = j % 5 - 2
  CHECK_CLOSE(x.grad(), tensor(c.dx, c.x_sizes, kF64).to(dtype), 0, 0);
}

}  // namespace

TEST_CASE("pad matches PyTorch's results and gradients in every mode") {
  for (const golden::PadCase& c : golden::pad_cases()) {
    check_golden(c, DType::Float64, MemoryFormat::Contiguous);
    check_golden(c, DType::Float32, MemoryFormat::Contiguous);
    check_golden(c, DType::Float64, MemoryFormat::ChannelsLast);
  }
}

TEST_CASE("pad gradcheck: every mode, positive, negative and mixed pads, strided input") {
  Generator gen(8);
  const TensorOptions grad64 = {.dtype = DType::Float64, .requires_grad = true};
  const Tensor x = randn({2, 3, 4, 5}, grad64, &gen);
  struct Case {
    std::vector<int64_t> pads;
    PadMode mode;
  };
  const Case cases[] = {
      {{1, 2}, PadMode::Constant},           {{2, -1, -2, 3}, PadMode::Constant},
      {{0, 0, 1, 1, 1, 0}, PadMode::Constant}, {{3, 2, 2, 3}, PadMode::Reflect},
      {{-2, 1, 3, -1}, PadMode::Reflect},    {{5, 2, 1, 6}, PadMode::Replicate},
      {{-3, 2, -1, -2}, PadMode::Replicate}, {{1, 1, 1, 1, 1, 1}, PadMode::Replicate},
  };
  for (const Case& c : cases) {
    CAPTURE(pad_mode_name(c.mode));
    GradcheckResult r = gradcheck(
        [&c](const std::vector<Tensor>& in) { return pad(in[0].transpose(2, 3), c.pads, c.mode, 0.5); },
        {x});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("pad of a strided channels-last view is channels-last, and so is its gradient") {
  Generator gen(9);
  Tensor x = randn({2, 4, 6, 6}, {.dtype = DType::Float64}, &gen).contiguous(MemoryFormat::ChannelsLast);
  x.requires_grad_();
  const Tensor sub = x.slice(2, 0, 6, 2).slice(3, 0, 6, 2);
  const Tensor y = pad(sub, {0, 0, 0, 0, 2, 2});
  CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(y, pad(sub.contiguous(), {0, 0, 0, 0, 2, 2}), 0, 0);
  y.backward(randn(y.sizes(), {.dtype = DType::Float64}, &gen));
  CHECK(x.grad().is_contiguous(MemoryFormat::ChannelsLast));
}

TEST_CASE("pad copies integer and Bool tensors (no gradient there)") {
  const Tensor i = tensor({1, 2, 3}, {1, 3}, {.dtype = DType::Int64});
  const Tensor p = pad(i, {2, 1}, PadMode::Reflect);
  CHECK(p.dtype() == DType::Int64);
  CHECK(testing::values(p) == std::vector<double>{3, 2, 1, 2, 3, 2});
  const Tensor m = pad(tensor({1, 0}, {2}, {.dtype = DType::Bool}), {1, 1}, PadMode::Constant, 1);
  CHECK(m.dtype() == DType::Bool);
  CHECK(testing::values(m) == std::vector<double>{1, 1, 0, 1});
}

TEST_CASE("pad argument errors name the op, the dim and the values") {
  const Tensor x = zeros({1, 2, 3, 4});
  CHECK_THROWS_WITH_FRAGMENT(pad(x, {1}), ValueError,
                             "[pad] the pad list must hold (before, after) pairs");
  CHECK_THROWS_WITH_FRAGMENT(pad(x, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}), ShapeError,
                             "[pad] 5 pairs of pads for a 4-D x of shape (1, 2, 3, 4)");
  CHECK_THROWS_WITH_FRAGMENT(pad(x, {-5, 0}), ShapeError,
                             "[pad] dim 3 of x (1, 2, 3, 4) (size 4), padding (-5, 0): the "
                             "negative padding removes 1 elements more than the dim has");
  CHECK_THROWS_WITH_FRAGMENT(pad(x, {4, 0}, PadMode::Reflect), ShapeError,
                             "padding (4, 0): reflect padding must be smaller than the dim it pads");
  CHECK_THROWS_WITH_FRAGMENT(pad(x, {-3, -1}, PadMode::Replicate), ShapeError,
                             "replicate padding leaves 0 elements; it must leave at least 1");
  CHECK_THROWS_WITH_FRAGMENT(pad(Tensor(), {1, 1}), ValueError, "[pad] x is an undefined tensor");
  CHECK(pad(x, {-4, 0}).sizes() == Shape{1, 2, 3, 0});  // a constant crop may empty a dim
}

}  // namespace loom
