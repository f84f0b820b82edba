// File: tests/core/tensor_test.cc
// Tensor handles: factories for every dtype (eye and linspace against
// PyTorch's values), dtype conversion, element access,
// copy_/contiguous/clone, channels-last layout and device errors.
// N batch, C channels, H, W.
#include "core/tensor.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "tests/testing.h"

namespace loom {
namespace {

constexpr DType kAllDtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                DType::Int32,   DType::Int64,   DType::UInt8,   DType::Bool};
const TensorOptions kF64 = {.dtype = DType::Float64};
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// 0, 1, 2, ... laid out as `sizes` (float32 unless told).
Tensor iota(const Shape& sizes, DType dtype = DType::Float32) {
  return arange(0.0, static_cast<double>(numel_of(sizes)), 1.0, {.dtype = dtype}).view(sizes);
}

// --- factories -----------------------------------------------------------------------

TEST_CASE("empty / zeros / ones / full in every dtype: metadata and values") {
  for (DType dtype : kAllDtypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor e = empty({2, 3, 4}, {.dtype = dtype});
    CHECK(e.sizes() == Shape{2, 3, 4});
    CHECK(e.strides() == Shape{12, 4, 1});
    CHECK(e.dtype() == dtype);
    CHECK(e.numel() == 24);
    CHECK(e.dim() == 3);
    CHECK(e.device() == Device::cpu());
    CHECK(e.storage()->nbytes() == 24 * element_size(dtype));
    CHECK(e.is_leaf());
    CHECK_FALSE(e.requires_grad());
    CHECK(zeros({2, 2}, {.dtype = dtype}).to_vector<double>() == std::vector<double>(4, 0.0));
    CHECK(ones({3}, {.dtype = dtype}).to_vector<double>() == std::vector<double>(3, 1.0));
    const double expected_two = dtype == DType::Bool ? 1.0 : 2.0;
    CHECK(full({2}, 2.0, {.dtype = dtype}).to_vector<double>() == std::vector<double>(2, expected_two));
  }
  CHECK(full({2}, 2.75, {.dtype = DType::Int32}).to_vector<double>() == std::vector<double>{2, 2});
  CHECK(full({1}, 1.0 / 3.0, {.dtype = DType::Float16}).item() == 0.333251953125);
  CHECK(full({}, 4.5).dim() == 0);
  CHECK(full({}, 4.5).item() == 4.5);
  CHECK(empty({0, 3}).numel() == 0);
}

TEST_CASE("factories reject negative sizes and non-float requires_grad") {
  CHECK_THROWS_WITH_FRAGMENT(empty({2, -1}), ValueError, "[empty] sizes must be non-negative, got (2, -1)");
  CHECK_THROWS_WITH_FRAGMENT(zeros({-3}), ValueError, "(-3,)");
  CHECK_THROWS_WITH_FRAGMENT(zeros({2}, {.dtype = DType::Int32, .requires_grad = true}), TypeError,
                             "only floating-point tensors can require grad, got int32");
  const Tensor leaf = ones({2}, {.dtype = DType::Float16, .requires_grad = true});
  CHECK(leaf.requires_grad());
  CHECK(leaf.is_leaf());
}

TEST_CASE("factories reject shapes whose strides or byte size overflow, even with no elements") {
  const int64_t huge = int64_t{1} << 62;
  CHECK_THROWS_WITH_FRAGMENT(empty({0, huge, huge}), ValueError,
                             "[empty] shape (0, 4611686018427387904, 4611686018427387904) of "
                             "float32 is too large");
  CHECK_THROWS_WITH_FRAGMENT(zeros({0, std::numeric_limits<int64_t>::max(), 2}), ValueError,
                             "overflow 64 bits");
  CHECK_THROWS_WITH_FRAGMENT(empty({0, huge}, {.dtype = DType::Float64}), ValueError,
                             "of float64 is too large");  // 2^62 elements fit, 2^65 bytes do not
  CHECK_THROWS_WITH_FRAGMENT(randn({0, huge, 4}), ValueError, "[randn] shape");
  CHECK_THROWS_WITH_FRAGMENT(contiguous_strides({0, huge, huge}), ValueError,
                             "[contiguous_strides]");
  CHECK_THROWS_WITH_FRAGMENT(channels_last_strides({0, huge, huge, 1}), ValueError,
                             "[channels_last_strides]");
  const Tensor fits = empty({0, int64_t{1} << 30, int64_t{1} << 30}, {.dtype = DType::UInt8});
  CHECK(fits.strides() == Shape{int64_t{1} << 60, int64_t{1} << 30, 1});
}

TEST_CASE("random tensors too large for memory are an OutOfMemoryError, not std::bad_alloc") {
  // 2^41 bytes: more than this machine has, and past ASan's largest allocation.
  CHECK_THROWS_WITH_FRAGMENT(randint(0, 256, {int64_t{1} << 41}, {.dtype = DType::UInt8}),
                             OutOfMemoryError, "out of host memory allocating 2199023255552 bytes");
  CHECK_THROWS_AS(rand({int64_t{1} << 39}), OutOfMemoryError);
}

TEST_CASE("random draws are generated in chunks without changing the values") {
  // More than one chunk of draws: element i is still draw i, in every dtype and layout.
  Generator a(9), b(9);
  const Tensor wide = randint(0, 1000, {3, 70000}, {.dtype = DType::Int64}, &a);
  const Tensor narrow = randint(0, 1000, {3, 70000}, {.dtype = DType::Int32}, &b);
  CHECK_CLOSE(wide.to(DType::Int32), narrow, 0, 0);
  Generator c(4), d(4);
  const Tensor nchw = randn({2, 3, 150, 150}, {}, &c);
  const Tensor nhwc = randn({2, 3, 150, 150}, {.memory_format = MemoryFormat::ChannelsLast}, &d);
  CHECK(nhwc.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(nhwc, nchw, 0, 0);
}

TEST_CASE("arange: counts, negative and fractional steps, dtypes") {
  CHECK(arange(5).to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(arange(1.0, 2.0, 0.25).to_vector<double>() == std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(arange(3.0, 0.0, -1.0).to_vector<double>() == std::vector<double>{3, 2, 1});
  CHECK(arange(0.0, 1.0, 0.3).numel() == 4);  // 0, 0.3, 0.6, 0.9
  CHECK(arange(2.0, 1.0).numel() == 0);
  CHECK(arange(4, {.dtype = DType::Int64}).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(arange(4, {.dtype = DType::Int64}).dtype() == DType::Int64);
  CHECK_THROWS_WITH_FRAGMENT(arange(0.0, 1.0, 0.0), ValueError, "[arange] needs finite start, end and a non-zero step");
  CHECK_THROWS_WITH_FRAGMENT(arange(0.0, kInf), ValueError, "inf");
}

TEST_CASE("eye: identity matrices of any shape and dtype, as torch.eye") {
  using V = std::vector<double>;
  CHECK(eye(3).sizes() == Shape{3, 3});
  CHECK(eye(3).dtype() == DType::Float32);
  CHECK(eye(3).to_vector<double>() == V{1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(eye(2, 3).to_vector<double>() == V{1, 0, 0, 0, 1, 0});
  CHECK(eye(3, 2).to_vector<double>() == V{1, 0, 0, 1, 0, 0});
  CHECK(eye(1, 4).to_vector<double>() == V{1, 0, 0, 0});
  CHECK(eye(0).sizes() == Shape{0, 0});
  CHECK(eye(2, 0).sizes() == Shape{2, 0});
  CHECK(eye(0, 3).sizes() == Shape{0, 3});
  for (DType dtype : kAllDtypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor identity = eye(4, 5, {.dtype = dtype});
    CHECK(identity.dtype() == dtype);
    CHECK(identity.is_contiguous());
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t j = 0; j < 5; ++j) CHECK(identity.at({i, j}) == (i == j ? 1.0 : 0.0));
    }
  }
  CHECK(eye(2, {.dtype = DType::Bool}).to_vector<bool>() == std::vector<bool>{true, false, false, true});
  const Tensor leaf = eye(2, {.dtype = DType::Float64, .requires_grad = true});
  CHECK(leaf.requires_grad());
  CHECK(leaf.is_leaf());
}

TEST_CASE("eye rejects negative sizes and integer requires_grad") {
  CHECK_THROWS_WITH_FRAGMENT(eye(-1), ValueError, "[eye] n and m must be >= 0, got n = -1 and m = -1");
  CHECK_THROWS_WITH_FRAGMENT(eye(2, -3), ValueError, "[eye] n and m must be >= 0, got n = 2 and m = -3");
  CHECK_THROWS_WITH_FRAGMENT(eye(2, {.dtype = DType::Int64, .requires_grad = true}), TypeError,
                             "[eye] only floating-point tensors can require grad, got int64");
  CHECK_THROWS_WITH_FRAGMENT(eye(int64_t{1} << 40, int64_t{1} << 40), ValueError, "[eye] shape");
}

// linspace's expected values are torch.linspace's (PyTorch 1.13 on the CPU,
// printed to the last digit, for counts under its vectorized loop's 8 float64
// or 16 float32 elements): each half counts from its own end, so floats carry
// PyTorch's roundings and the last element is `end` exactly.
TEST_CASE("linspace: PyTorch's values in float32 and float64, and the edge counts") {
  using F = std::vector<float>;
  using D = std::vector<double>;
  CHECK(linspace(0.0, 1.0, 5).dtype() == DType::Float32);
  CHECK(linspace(0.0, 1.0, 5).to_vector<float>() == F{0, 0.25f, 0.5f, 0.75f, 1});
  // The middle is 1 - 3 * step with step 0.33333334f, the product unrounded (a
  // fused multiply-add, as PyTorch's compiled kernels): -2^-25, not 0.
  CHECK(linspace(-1.0, 1.0, 7).to_vector<float>() ==
        F{-1, -0.666666627f, -0.333333313f, -2.98023224e-08f, 0.333333313f, 0.666666627f, 1});
  CHECK(linspace(0.1, 0.7, 4).to_vector<float>() == F{0.100000001f, 0.299999982f, 0.5f, 0.699999988f});
  CHECK(linspace(1.0, 0.0, 6).to_vector<float>() ==
        F{1, 0.800000012f, 0.600000024f, 0.400000006f, 0.200000003f, 0});
  CHECK(linspace(-1.0, 1.0, 7, kF64).to_vector<double>() ==
        D{-1, -0.6666666666666667, -0.33333333333333337, 5.551115123125783e-17, 0.33333333333333337,
          0.6666666666666667, 1});
  // 0.1 + 3 * 0.2 is 0.7000000000000001 in float64: the second half ends at 0.7 itself.
  const std::vector<double> tenths = linspace(0.1, 0.7, 4, kF64).to_vector<double>();
  CHECK(tenths == D{0.1, 0.3, 0.5, 0.7});
  CHECK(tenths.back() == 0.7);
  CHECK(linspace(-2.5, 7.25, 6, kF64).to_vector<double>() == D{-2.5, -0.55, 1.4, 3.35, 5.3, 7.25});
  // Elements 6 and 7 count down from 1 (as PyTorch's CUDA kernel has them); the
  // CPU's vectorized loop, from 8 float64 elements on, counts them up from 0
  // instead and gives 0.6666666666666666 and 0.7777777777777777.
  CHECK(linspace(0.0, 1.0, 10, kF64).to_vector<double>() ==
        D{0.0, 0.1111111111111111, 0.2222222222222222, 0.3333333333333333, 0.4444444444444444,
          0.5555555555555556, 0.6666666666666667, 0.7777777777777778, 0.8888888888888888, 1.0});
  CHECK(linspace(3.0, 3.0, 1).to_vector<double>() == D{3});
  CHECK(linspace(0.7, 5.0, 1, kF64).to_vector<double>() == D{0.7});  // {start}, whatever end
  CHECK(linspace(0.7, 5.0, 1).to_vector<float>() == F{0.699999988f});
  CHECK(linspace(0.0, 10.0, 0).sizes() == Shape{0});
  const Tensor leaf = linspace(0.0, 1.0, 3, {.dtype = DType::Float64, .requires_grad = true});
  CHECK(leaf.requires_grad());
}

TEST_CASE("linspace: integer dtypes truncate start, end and each value as PyTorch's; 16-bit floats round") {
  using I = std::vector<int64_t>;
  const TensorOptions i64 = {.dtype = DType::Int64};
  CHECK(linspace(0.0, 10.0, 4, i64).dtype() == DType::Int64);
  CHECK(linspace(0.0, 10.0, 4, i64).to_vector<int64_t>() == I{0, 3, 6, 10});
  CHECK(linspace(-5.0, 5.0, 4, i64).to_vector<int64_t>() == I{-5, -1, 1, 5});
  CHECK(linspace(2.7, 9.9, 3, i64).to_vector<int64_t>() == I{2, 5, 9});
  CHECK(linspace(-3.9, 3.9, 5, i64).to_vector<int64_t>() == I{-3, -1, 0, 1, 3});
  CHECK(linspace(2.7, 0.0, 1, i64).to_vector<int64_t>() == I{2});
  CHECK(linspace(10.0, 0.0, 5, {.dtype = DType::Int32}).to_vector<int64_t>() == I{10, 7, 5, 2, 0});
  CHECK(linspace(0.0, 255.0, 4, {.dtype = DType::UInt8}).to_vector<int64_t>() == I{0, 85, 170, 255});
  // bfloat16 and float16 round after each operation, as c10's types: 3 * 125 = 375 is 376 in bfloat16.
  using D = std::vector<double>;
  CHECK(linspace(-1.0, 1.0, 7, {.dtype = DType::BFloat16}).to_vector<double>() ==
        D{-1, -0.6640625, -0.33203125, 0, 0.33203125, 0.6640625, 1});
  CHECK(linspace(0.0, 1000.0, 9, {.dtype = DType::BFloat16}).to_vector<double>() ==
        D{0, 125, 250, 376, 500, 624, 752, 876, 1000});
  CHECK(linspace(0.0, 1.0, 11, {.dtype = DType::Float16}).to_vector<double>() ==
        D{0.0, 0.0999755859375, 0.199951171875, 0.2998046875, 0.39990234375, 0.5, 0.60009765625, 0.7001953125,
          0.7998046875, 0.89990234375, 1.0});
}

TEST_CASE("linspace on random ranges: ends exact, evenly spaced to a few ulps, in every floating dtype") {
  Generator gen(81);
  const Tensor draws = rand({40, 3}, kF64, &gen);
  for (int64_t trial = 0; trial < 40; ++trial) {
    const double start = draws.at({trial, 0}) * 200 - 100, end = draws.at({trial, 1}) * 200 - 100;
    const auto steps = static_cast<int64_t>(draws.at({trial, 2}) * 40) + 2;
    for (auto [dtype, ulp] : {std::pair{DType::Float64, 0x1p-52}, std::pair{DType::Float32, 0x1p-23}}) {
      CAPTURE(start);
      CAPTURE(end);
      CAPTURE(steps);
      CAPTURE(dtype_name(dtype));
      const std::vector<double> v = linspace(start, end, steps, {.dtype = dtype}).to_vector<double>();
      REQUIRE(v.size() == static_cast<size_t>(steps));
      const double s = full({}, start, {.dtype = dtype}).item(), e = full({}, end, {.dtype = dtype}).item();
      CHECK(v.front() == s);
      CHECK(v.back() == e);
      // step's rounding, times at most half the count, plus the element's own.
      const double tolerance = 4 * ulp * std::max({std::fabs(s), std::fabs(e), 1.0});
      for (int64_t i = 0; i < steps; ++i) {
        const double ideal = s + (e - s) * static_cast<double>(i) / static_cast<double>(steps - 1);
        CHECK(std::fabs(v[i] - ideal) <= tolerance);
      }
    }
  }
}

TEST_CASE("linspace rejects negative steps, Bool, non-finite ends and integers out of range") {
  CHECK_THROWS_WITH_FRAGMENT(linspace(0.0, 1.0, -1), ValueError, "[linspace] steps must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(linspace(0.0, 1.0, 3, {.dtype = DType::Bool}), TypeError,
                             "[linspace] has no bool form; make a floating or integer one and compare it");
  CHECK_THROWS_WITH_FRAGMENT(linspace(0.0, kInf, 3), ValueError,
                             "[linspace] needs a finite start and end, got 0 and inf");
  CHECK_THROWS_WITH_FRAGMENT(linspace(kNaN, 1.0, 3), ValueError, "[linspace] needs a finite start and end");
  CHECK_THROWS_WITH_FRAGMENT(linspace(0.0, 300.0, 5, {.dtype = DType::UInt8}), ValueError,
                             "[linspace] start 0 and end 300 must fit in uint8 (they are truncated to it); pick a "
                             "wider dtype");
  CHECK_THROWS_WITH_FRAGMENT(linspace(-1e19, 0.0, 5, {.dtype = DType::Int64}), ValueError, "must fit in int64");
  CHECK_THROWS_WITH_FRAGMENT(linspace(0.0, 1.0, 3, {.dtype = DType::Int64, .requires_grad = true}), TypeError,
                             "[linspace] only floating-point tensors can require grad, got int64");
}

TEST_CASE("tensor() and from_host: values, dtype conversion and shape errors") {
  const Tensor t = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::Int32});
  CHECK(t.dtype() == DType::Int32);
  CHECK(t.at({1, 0}) == 4);
  CHECK_THROWS_WITH_FRAGMENT(tensor({1, 2, 3}, {2, 2}), ShapeError,
                             "[tensor] 3 values do not fill shape (2, 2) (4 elements)");
  const int32_t raw[] = {7, -8, 9, 10};
  const Tensor h = from_host(raw, DType::Int32, {2, 2}, kF64);
  CHECK(h.dtype() == DType::Float64);
  CHECK(h.to_vector<double>() == std::vector<double>{7, -8, 9, 10});
  CHECK_THROWS_WITH_FRAGMENT(from_host(raw, DType::Int32, {2, -2}, kF64), ValueError, "[from_host]");
  // A channels-last request keeps the logical (row-major NCHW) order of the source.
  const Tensor cl = from_host(raw, DType::Int32, {1, 2, 1, 2},
                              {.memory_format = MemoryFormat::ChannelsLast});
  CHECK(cl.strides() == Shape{4, 1, 4, 2});
  CHECK(cl.to_vector<double>() == std::vector<double>{7, -8, 9, 10});
  CHECK(cl.data_ptr<float>()[1] == 9);  // NHWC memory: (n0,h0,w0,c1) comes second
}

TEST_CASE("rand / randn / randint: shapes, dtypes, requires_grad") {
  Generator gen(3);
  CHECK(rand({2, 3}, {}, &gen).sizes() == Shape{2, 3});
  CHECK(randn({4}, {.dtype = DType::Float16}, &gen).dtype() == DType::Float16);
  CHECK(randn({2}, {.dtype = DType::Float64, .requires_grad = true}, &gen).requires_grad());
  CHECK(randint(0, 3, {5}, {.dtype = DType::UInt8}, &gen).dtype() == DType::UInt8);
  const Tensor cl = randn({2, 3, 4, 5}, {.memory_format = MemoryFormat::ChannelsLast}, &gen);
  CHECK(cl.is_contiguous(MemoryFormat::ChannelsLast));
}

TEST_CASE("rand_like / randn_like: like's sizes, dtype and layout, the draws of rand and randn") {
  const Tensor like = zeros({2, 3, 4, 5}, {.dtype = DType::Float64, .memory_format = MemoryFormat::ChannelsLast});
  Generator a(5), b(5);
  const Tensor u = rand_like(like, &a), n = randn_like(like, &a);
  CHECK(u.dtype() == DType::Float64);
  CHECK(n.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(u, rand(like.sizes(), {.dtype = DType::Float64}, &b), 0, 0);
  CHECK_CLOSE(n, randn(like.sizes(), {.dtype = DType::Float64}, &b), 0, 0);
  CHECK_FALSE(randn_like(like.clone().requires_grad_()).requires_grad());  // noise: a constant, as in PyTorch
  CHECK_THROWS_WITH_FRAGMENT(randn_like(Tensor()), ValueError, "[randn_like] like is an undefined tensor");
}

// --- dtype conversion ----------------------------------------------------------------

TEST_CASE("to(dtype) between every pair of dtypes keeps small integers") {
  for (DType from : kAllDtypes) {
    for (DType to : kAllDtypes) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      const Tensor x = tensor({0, 1, 1, 0}, {2, 2}, {.dtype = from});
      const Tensor y = x.to(to);
      CHECK(y.dtype() == to);
      CHECK(y.sizes() == Shape{2, 2});
      CHECK(y.to_vector<double>() == std::vector<double>{0, 1, 1, 0});
    }
  }
  const std::vector<double> values = {0, 3, 100, 255};
  for (DType from : kAllDtypes) {
    if (from == DType::Bool) continue;
    for (DType to : kAllDtypes) {
      if (to == DType::Bool) continue;
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      CHECK(tensor(values, {4}, {.dtype = from}).to(to).to_vector<double>() == values);
    }
  }
}

TEST_CASE("to(dtype): truncation to integers, bool as != 0, same dtype returns self") {
  const Tensor x = tensor({2.7, -2.7, 0.4, 0.0}, {4}, kF64);
  CHECK(x.to(DType::Int32).to_vector<double>() == std::vector<double>{2, -2, 0, 0});
  CHECK(x.to(DType::Int64).to_vector<double>() == std::vector<double>{2, -2, 0, 0});
  CHECK(x.to(DType::Bool).to_vector<double>() == std::vector<double>{1, 1, 1, 0});
  CHECK(tensor({1, 0}, {2}, {.dtype = DType::Bool}).to(DType::Float32).to_vector<float>() ==
        std::vector<float>{1, 0});
  CHECK(x.to(DType::Float64).is_same(x));
  CHECK_FALSE(x.to(DType::Float32).is_same(x));
}

TEST_CASE("to(float16) / to(bfloat16): hand-checked rounding and back") {
  const Tensor third = tensor({1.0 / 3.0}, {1}, kF64);
  CHECK(third.to(DType::Float16).item() == 0.333251953125);
  CHECK(third.to(DType::Float16).to(DType::Float64).item() == 0.333251953125);
  CHECK(third.to(DType::BFloat16).item() == 0.333984375);
  CHECK(tensor({1.00390625}, {1}).to(DType::BFloat16).item() == 1.0);  // tie to even
  CHECK(tensor({1.01171875}, {1}).to(DType::BFloat16).item() == 1.015625);
  CHECK(tensor({70000, -70000}, {2}).to(DType::Float16).to_vector<double>() ==
        std::vector<double>{kInf, -kInf});
  CHECK(tensor({1e-7}, {1}).to(DType::Float16).item() == 1.1920928955078125e-07);
  CHECK(tensor({65504}, {1}, kF64).to(DType::Float16).item() == 65504);
  CHECK(tensor({2049}, {1}, {.dtype = DType::Int32}).to(DType::Float16).item() == 2048);  // tie to even
}

TEST_CASE("to(float16 / bfloat16 / float32 / float64) preserves inf and NaN") {
  const Tensor special = tensor({kInf, -kInf, kNaN, 1.5}, {4}, kF64);
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32}) {
    CAPTURE(dtype_name(dtype));
    const std::vector<double> back = special.to(dtype).to(DType::Float64).to_vector<double>();
    CHECK(back[0] == kInf);
    CHECK(back[1] == -kInf);
    CHECK(std::isnan(back[2]));
    CHECK(back[3] == 1.5);
  }
}

TEST_CASE("to(dtype) keeps a channels-last layout") {
  const Tensor x = iota({2, 3, 2, 2}).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = x.to(DType::Float64);
  CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(y, iota({2, 3, 2, 2}), 0, 0);
}

// --- element access ------------------------------------------------------------------

TEST_CASE("at / set / item with negative indices") {
  Tensor x = iota({2, 3});
  CHECK(x.at({0, 0}) == 0);
  CHECK(x.at({1, 2}) == 5);
  CHECK(x.at({-1, -1}) == 5);
  CHECK(x.at({-2, 1}) == 1);
  x.set({-1, 0}, 42.5);
  CHECK(x.at({1, 0}) == 42.5);
  CHECK(x.to_vector<double>() == std::vector<double>{0, 1, 2, 42.5, 4, 5});
  Tensor i = zeros({3}, {.dtype = DType::Int64});
  i.set({1}, 7.9);
  CHECK(i.at({1}) == 7);
  CHECK(full({1, 1}, 3.0).item() == 3);
  CHECK(full({}, -2.0, kF64).item() == -2);
  Tensor b = zeros({2}, {.dtype = DType::Bool});
  b.set({0}, 5.0);
  CHECK(b.to_vector<double>() == std::vector<double>{1, 0});
}

TEST_CASE("at / set / item reject bad indices with the shape in the message") {
  Tensor x = iota({2, 3});
  CHECK_THROWS_WITH_FRAGMENT(x.at({2, 0}), IndexError, "[at] index (2, 0) is out of bounds for shape (2, 3) (dim 0 has size 2)");
  CHECK_THROWS_WITH_FRAGMENT(x.at({0, -4}), IndexError, "dim 1 has size 3");
  CHECK_THROWS_WITH_FRAGMENT(x.at({0}), IndexError, "[at] index (0,) has 1 entries but the tensor of shape (2, 3) has 2 dims");
  CHECK_THROWS_WITH_FRAGMENT(x.set({0, 3}, 1.0), IndexError, "out of bounds");
  CHECK_THROWS_WITH_FRAGMENT(x.item(), ValueError, "[item] needs a tensor with one element, got shape (2, 3) (6 elements)");
  CHECK_THROWS_WITH_FRAGMENT(empty({0}).item(), ValueError, "(0 elements)");
}

TEST_CASE("metadata accessors: negative dims, errors, options, data_ptr type check") {
  const Tensor x = empty({2, 3, 4}, kF64);
  CHECK(x.size(-1) == 4);
  CHECK(x.stride(-3) == 12);
  CHECK_THROWS_WITH_FRAGMENT(x.size(3), IndexError, "[size] dim 3 is out of range for a 3-D tensor (expected -3 to 2)");
  CHECK(x.options().dtype == DType::Float64);
  CHECK(x.options().device == Device::cpu());
  CHECK(x.data_ptr<double>() == x.raw_data());
  CHECK_THROWS_WITH_FRAGMENT(x.data_ptr<float>(), TypeError,
                             "[data_ptr] tensor has dtype float64 but its data was requested as float32");
  const Tensor undefined;
  CHECK_FALSE(undefined.defined());
  CHECK_THROWS_WITH_FRAGMENT(undefined.sizes(), ValueError, "undefined");
  CHECK_THROWS_WITH_FRAGMENT(undefined.numel(), ValueError, "loom::zeros");
}

// --- copies --------------------------------------------------------------------------

TEST_CASE("copy_ broadcasts the source and casts its dtype") {
  Tensor dst = zeros({2, 3});
  dst.copy_(tensor({1, 2, 3}, {3}, kF64));
  CHECK(dst.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
  dst.copy_(tensor({7, 8}, {2, 1}, {.dtype = DType::Int32}));
  CHECK(dst.to_vector<double>() == std::vector<double>{7, 7, 7, 8, 8, 8});
  dst.copy_(full({}, 0.5, {.dtype = DType::Float16}));
  CHECK(dst.to_vector<double>() == std::vector<double>(6, 0.5));
  Tensor ints = zeros({3}, {.dtype = DType::Int32});
  ints.copy_(tensor({1.9, -1.9, 3.0}, {3}));
  CHECK(ints.to_vector<double>() == std::vector<double>{1, -1, 3});
}

TEST_CASE("copy_ into a strided destination writes only the viewed elements") {
  Tensor base = zeros({3, 4});
  Tensor column = base.select(1, 2);  // stride 4
  column.copy_(tensor({1, 2, 3}, {3}));
  CHECK(base.to_vector<double>() == std::vector<double>{0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0});
  Tensor transposed = zeros({2, 3}).t();  // (3, 2) strides (1, 3)
  transposed.copy_(iota({3, 2}));
  CHECK_CLOSE(transposed, iota({3, 2}), 0, 0);
}

TEST_CASE("copy_ rejects sources that do not broadcast to the destination") {
  Tensor dst = zeros({3});
  CHECK_THROWS_WITH_FRAGMENT(dst.copy_(zeros({2, 3})), ShapeError,
                             "[copy_] source of shape (2, 3) cannot be broadcast to the destination's shape (3,)");
  CHECK_THROWS_WITH_FRAGMENT(dst.copy_(zeros({4})), ShapeError, "[copy_] shapes (4,) and (3,) cannot be broadcast");
  CHECK_THROWS_WITH_FRAGMENT(dst.copy_(Tensor()), ValueError, "[copy_] the source tensor is undefined");
}

TEST_CASE("copy_all copies each pair as copy_ does, and checks its arguments") {
  Tensor a = zeros({2, 3}), b = zeros({3}, {.dtype = DType::Int64});
  copy_all({a, b}, {iota({2, 3}), tensor({4, 5, 6}, {3})});
  CHECK_CLOSE(a, iota({2, 3}), 0, 0);
  CHECK(b.to_vector<double>() == std::vector<double>{4, 5, 6});
  CHECK_THROWS_WITH_FRAGMENT(copy_all({a}, {}), ValueError,
                             "[copy_all] takes one source per destination, got 1 destinations and 0 sources");
  CHECK_THROWS_WITH_FRAGMENT(copy_all({a}, {Tensor()}), ValueError, "[copy_all] pair 0 has an undefined tensor");
  CHECK_THROWS_WITH_FRAGMENT(copy_all({a}, {zeros({4})}), ShapeError, "cannot be broadcast");
  Tensor leaf = zeros({3}).requires_grad_();
  CHECK_THROWS_AS(copy_all({leaf}, {zeros({3})}), AutogradError);
}

TEST_CASE("contiguous() returns self when already contiguous, else a dense copy") {
  const Tensor x = iota({3, 4});
  CHECK(x.contiguous().is_same(x));
  const Tensor t = x.t();
  CHECK_FALSE(t.is_contiguous());
  const Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.strides() == Shape{3, 1});
  CHECK(c.storage().get() != x.storage().get());
  CHECK_CLOSE(c, t, 0, 0);
  CHECK(c.to_vector<double>() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  const Tensor stepped = iota({10}).slice(0, 1, 10, 3);  // 1, 4, 7
  CHECK(stepped.contiguous().to_vector<double>() == std::vector<double>{1, 4, 7});
  CHECK(stepped.contiguous().storage_offset() == 0);
}

TEST_CASE("clone() copies storage, values and layout") {
  Tensor x = iota({2, 3});
  Tensor y = x.clone();
  CHECK(y.storage().get() != x.storage().get());
  CHECK_CLOSE(y, x, 0, 0);
  y.set({0, 0}, 100);
  CHECK(x.at({0, 0}) == 0);
  const Tensor cl = iota({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast);
  CHECK(cl.clone().is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(cl.clone(MemoryFormat::Contiguous).strides() == Shape{60, 20, 5, 1});
  CHECK_CLOSE(cl.clone(MemoryFormat::Contiguous), cl, 0, 0);
  // A non-dense view clones to a dense row-major tensor.
  CHECK(x.t().clone().strides() == Shape{2, 1});
}

TEST_CASE("fill_ and zero_ write only through the view") {
  Tensor x = iota({2, 3});
  x.select(0, 1).fill_(-1);
  CHECK(x.to_vector<double>() == std::vector<double>{0, 1, 2, -1, -1, -1});
  x.slice(1, 0, 3, 2).zero_();
  CHECK(x.to_vector<double>() == std::vector<double>{0, 1, 0, 0, -1, 0});
}

TEST_CASE("empty_like / zeros_like / ones_like follow dtype and layout") {
  const Tensor cl = empty({2, 3, 4, 5}, {.dtype = DType::Float64, .memory_format = MemoryFormat::ChannelsLast});
  const Tensor z = zeros_like(cl);
  CHECK(z.dtype() == DType::Float64);
  CHECK(z.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(z.to_vector<double>() == std::vector<double>(120, 0.0));
  CHECK(ones_like(iota({3, 2}).t()).strides() == Shape{3, 1});
  CHECK(empty_like(iota({3}, DType::UInt8)).dtype() == DType::UInt8);
}

// --- channels-last -------------------------------------------------------------------

TEST_CASE("channels-last: strides (HWC, 1, WC, C), layout queries, same values as NCHW") {
  const Tensor nchw = iota({2, 3, 4, 5});  // N 2, C 3, H 4, W 5
  const Tensor nhwc = nchw.contiguous(MemoryFormat::ChannelsLast);
  CHECK(nhwc.sizes() == Shape{2, 3, 4, 5});
  CHECK(nhwc.strides() == Shape{60, 1, 15, 3});
  CHECK(nhwc.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(nhwc.is_contiguous());
  CHECK(nhwc.suggest_memory_format() == MemoryFormat::ChannelsLast);
  CHECK(nchw.suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK_FALSE(nchw.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(nhwc, nchw, 0, 0);
  CHECK(nhwc.at({1, 2, 3, 4}) == 119);
  // In memory the channel moves fastest: element (0, c, 0, 0) sits at offset c.
  const float* raw = nhwc.data_ptr<float>();
  CHECK(raw[1] == nchw.at({0, 1, 0, 0}));
  CHECK(raw[3] == nchw.at({0, 0, 0, 1}));
  CHECK(raw[15] == nchw.at({0, 0, 1, 0}));
  const Tensor back = nhwc.contiguous();
  CHECK(back.strides() == Shape{60, 20, 5, 1});
  CHECK_CLOSE(back, nchw, 0, 0);
  CHECK(nhwc.contiguous(MemoryFormat::ChannelsLast).is_same(nhwc));
}

TEST_CASE("channels-last: NHWC memory permuted to NCHW dims is channels-last") {
  const Tensor nhwc_dims = iota({2, 4, 5, 3});  // N, H, W, C
  const Tensor x = nhwc_dims.permute({0, 3, 1, 2});
  CHECK(x.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(x.suggest_memory_format() == MemoryFormat::ChannelsLast);
  CHECK(x.at({1, 2, 3, 4}) == nhwc_dims.at({1, 3, 4, 2}));
}

TEST_CASE("channels-last: strided views ordered as NHWC suggest it, as PyTorch's rule does") {
  const Tensor nhwc = iota({2, 6, 8, 10}).contiguous(MemoryFormat::ChannelsLast);
  // The option-A shortcut of CIFAR ResNets: every second row and column.
  const Tensor sub = nhwc.slice(2, 0, 8, 2).slice(3, 0, 10, 2);
  CHECK_FALSE(sub.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(sub.suggest_memory_format() == MemoryFormat::ChannelsLast);
  CHECK(nhwc.narrow(1, 1, 3).suggest_memory_format() == MemoryFormat::ChannelsLast);
  CHECK(empty_like(sub).is_contiguous(MemoryFormat::ChannelsLast));
  // The same views of NCHW memory stay NCHW.
  const Tensor nchw = iota({2, 6, 8, 10});
  CHECK(nchw.slice(2, 0, 8, 2).slice(3, 0, 10, 2).suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK(nchw.narrow(1, 1, 3).suggest_memory_format() == MemoryFormat::Contiguous);
  // Strides that order nothing as NHWC: broadcast channels, C between H and W, not 4-D.
  CHECK(iota({2, 1, 8, 10}).expand({2, 6, 8, 10}).suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK(iota({2, 8, 6, 10}).permute({0, 2, 1, 3}).suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK(iota({2, 6, 8}).slice(2, 0, 8, 2).suggest_memory_format() == MemoryFormat::Contiguous);
}

TEST_CASE("channels-last: ambiguous and invalid cases") {
  // With C = 1 (or H = W = 1) both layouts describe the same memory: prefer NCHW.
  const Tensor one_channel = empty({2, 1, 3, 3}, {.memory_format = MemoryFormat::ChannelsLast});
  CHECK(one_channel.is_contiguous());
  CHECK(one_channel.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(one_channel.suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK_FALSE(iota({2, 3}).is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_THROWS_WITH_FRAGMENT(iota({2, 3, 4}).contiguous(MemoryFormat::ChannelsLast), ShapeError,
                             "[channels_last] needs a 4-D (N, C, H, W) tensor, got shape (2, 3, 4)");
  CHECK_THROWS_WITH_FRAGMENT(empty({2, 3}, {.memory_format = MemoryFormat::ChannelsLast}), ShapeError, "(2, 3)");
}

// --- devices -------------------------------------------------------------------------

TEST_CASE("to(cpu) returns self; device strings") {
  const Tensor x = iota({2});
  CHECK(x.to(Device::cpu()).is_same(x));
  CHECK(x.cpu().is_same(x));
  CHECK(Device::cpu().str() == "cpu");
  CHECK(Device::cuda(1).str() == "cuda:1");
}

TEST_CASE("to(cuda) without a usable GPU throws DeviceError with a clear message" *
          doctest::skip(cuda_available())) {
  const Tensor x = iota({2, 3});
  CHECK_THROWS_WITH_FRAGMENT(x.to(testing::test_gpu()), DeviceError, "CUDA");
  CHECK_THROWS_WITH_FRAGMENT(zeros({4}, {.device = testing::test_gpu()}), DeviceError, "CUDA");
  try {
    (void)x.to(testing::test_gpu());
  } catch (const DeviceError& e) {
    const std::string message = e.what();
    CAPTURE(message);
    CHECK((message.find("Device::cpu()") != std::string::npos ||
           message.find("no CUDA backend") != std::string::npos));
  }
}

TEST_CASE("an empty tensor cannot move to a GPU that is not there either" *
          doctest::skip(cuda_available())) {
  // Zero bytes need no allocation, but the device must still be checked.
  CHECK_THROWS_AS(zeros({0}).to(testing::test_gpu()), DeviceError);
  CHECK_THROWS_AS(empty({2, 0}, {.device = testing::test_gpu()}), DeviceError);
}

}  // namespace
}  // namespace loom
