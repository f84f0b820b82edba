// File: tests/core/cuda/elementwise_gpu_test.cc
// The CUDA elementwise kernels against the CPU reference kernels on the same
// inputs: every op, float32 and float64, NCHW, channels-last, sliced, permuted,
// misaligned and broadcast operands, odd sizes and empty tensors, and the NaN conventions.
// GPU outputs start as NaN, so an element a kernel fails to write shows up. The integer
// kernels (int32, int64, uint8) are compared exactly, on full-range values.
//
// Tolerances: both sides compute in the tensor's dtype; they differ only by the
// device math library (a few ulp for exp, erf, tanh, pow, sin, cos) and FMA contraction,
// so float32 uses rtol 1e-5, atol 1e-6 and float64 rtol 1e-12, atol 1e-13 (the
// atol covers cancellation near zero, e.g. 1 - y * y in TanhBackward).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu/activation.h"
#include "core/cpu/elementwise.h"
#include "core/cuda/elementwise.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr DType kDtypes[] = {DType::Float32, DType::Float64};

struct Tolerance {
  double rtol, atol;
};

Tolerance tolerance_for(DType dtype) {
  return dtype == DType::Float32 ? Tolerance{1e-5, 1e-6} : Tolerance{1e-12, 1e-13};
}

// A way to get a (2, 3, 5, 7) tensor from a base of sizes `base`, applied alike
// to a CPU tensor and its GPU copy so both have the same strides.
struct Layout {
  const char* name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};

const Shape kSizes = {2, 3, 5, 7};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"nchw", {2, 3, 5, 7}, [](const Tensor& t) { return t; }},
      {"channels_last", {2, 3, 5, 7},
       [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
      {"sliced", {2, 3, 10, 9}, [](const Tensor& t) { return t.slice(2, 1, 10, 2).slice(3, 1, 8); }},
      {"permuted", {7, 5, 3, 2}, [](const Tensor& t) { return t.permute({3, 2, 1, 0}); }},
      // Dense but one element past a 16-byte boundary: no 16-byte packs.
      {"offset", {2 * 3 * 5 * 7 + 1}, [](const Tensor& t) { return t.slice(0, 1, 2 * 3 * 5 * 7 + 1).view(kSizes); }},
  };
  return all;
}

// One input on both devices.
struct Operand {
  Tensor cpu, gpu;
};

Operand operand(const Layout& layout, const Tensor& base) {
  return {layout.view(base), layout.view(base.to(testing::test_gpu()))};
}

// Standard normal times 4 (rounding sees several integers), or positive (x * x + 0.1)
// where an op needs it (log, sqrt, pow).
Tensor random_base(const Shape& sizes, DType dtype, bool positive, Generator& gen) {
  Tensor x = randn(sizes, {.dtype = dtype}, &gen);
  return positive ? x * x + 0.1 : x * 4.0;
}

// A GPU output laid out as `layout` says, every element NaN until written.
Tensor poisoned_output(const Layout& layout, DType dtype) {
  return layout.view(full(layout.base, kNaN, {.dtype = dtype, .device = testing::test_gpu()}));
}

Tensor reference_output(const Shape& sizes, DType dtype) { return empty(sizes, {.dtype = dtype}); }

void check_matches(const Tensor& gpu_out, const Tensor& cpu_out) {
  Tolerance tol = tolerance_for(cpu_out.dtype());
  CHECK_CLOSE(gpu_out.cpu(), cpu_out, tol.rtol, tol.atol);
}

// The activations are their rows, tested in tests/core/ops/activation_gpu_test.cc.
const kernel::UnaryOp kUnaryOps[] = {
    kernel::UnaryOp::Neg,   kernel::UnaryOp::Exp,   kernel::UnaryOp::Log,   kernel::UnaryOp::Sqrt,
    kernel::UnaryOp::Abs,   kernel::UnaryOp::Sin,   kernel::UnaryOp::Cos,   kernel::UnaryOp::Floor,
    kernel::UnaryOp::Ceil,  kernel::UnaryOp::Round, kernel::UnaryOp::Trunc, kernel::UnaryOp::Log1p,
    kernel::UnaryOp::Expm1, kernel::UnaryOp::Log2,  kernel::UnaryOp::Log10, kernel::UnaryOp::Tan,
    kernel::UnaryOp::Atan,  kernel::UnaryOp::Erf,   kernel::UnaryOp::Rsqrt, kernel::UnaryOp::Sign};

const kernel::BinaryOp kBinaryOps[] = {kernel::BinaryOp::Add,         kernel::BinaryOp::Sub,
                                       kernel::BinaryOp::Mul,         kernel::BinaryOp::Div,
                                       kernel::BinaryOp::Pow,         kernel::BinaryOp::Equal,
                                       kernel::BinaryOp::FloorDivide, kernel::BinaryOp::Remainder};

// The integer rows: rounding leaves integers as they are; a zero divisor gives 0 on both devices.
const kernel::UnaryOp kIntegerUnaryOps[] = {kernel::UnaryOp::Neg,   kernel::UnaryOp::Abs,   kernel::UnaryOp::Floor,
                                            kernel::UnaryOp::Ceil,  kernel::UnaryOp::Round, kernel::UnaryOp::Trunc,
                                            kernel::UnaryOp::Sign};

const kernel::BinaryOp kIntegerBinaryOps[] = {kernel::BinaryOp::Add,         kernel::BinaryOp::Sub,
                                              kernel::BinaryOp::Mul,         kernel::BinaryOp::Pow,
                                              kernel::BinaryOp::Equal,       kernel::BinaryOp::FloorDivide,
                                              kernel::BinaryOp::Remainder};

// Inputs in each op's domain: positive for the logarithms and roots, within
// (-1.2, 1.2) mostly for tan (away from its poles, where float32 rounding of x
// moves the result by more than any tolerance).
Tensor unary_base(const Shape& sizes, DType dtype, kernel::UnaryOp op, Generator& gen) {
  using kernel::UnaryOp;
  const UnaryOp positive[] = {UnaryOp::Log, UnaryOp::Sqrt, UnaryOp::Log1p, UnaryOp::Log2, UnaryOp::Log10,
                              UnaryOp::Rsqrt};
  if (op == UnaryOp::Tan) return randn(sizes, {.dtype = dtype}, &gen) * 0.4;
  return random_base(sizes, dtype, std::find(std::begin(positive), std::end(positive), op) != std::end(positive), gen);
}

// Small integers, so Equal sees as many equal pairs as unequal ones.
Tensor small_integers(const Shape& sizes, DType dtype, Generator& gen) {
  return randint(0, 3, sizes, {.dtype = DType::Int64}, &gen).to(dtype);
}

Tensor binary_base(const Shape& sizes, DType dtype, kernel::BinaryOp op, bool first, Generator& gen) {
  if (op == kernel::BinaryOp::Equal) return small_integers(sizes, dtype, gen);
  return random_base(sizes, dtype, op == kernel::BinaryOp::Pow && first, gen);
}

}  // namespace

LOOM_GPU_TEST_CASE("unary kernels match the CPU for every op, dtype and layout") {
  Generator gen(101);
  for (DType dtype : kDtypes) {
    for (const Layout& layout : layouts()) {
      for (kernel::UnaryOp op : kUnaryOps) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(layout.name);
        CAPTURE(static_cast<int>(op));
        Operand x = operand(layout, unary_base(layout.base, dtype, op, gen));
        Tensor out = poisoned_output(layout, dtype), expected = reference_output(kSizes, dtype);
        cuda::unary(out.strided(), x.gpu.strided(), op);
        cpu::unary(expected.strided(), x.cpu.strided(), op);
        check_matches(out, expected);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("binary kernels match the CPU for every op, dtype and layout") {
  Generator gen(102);
  for (DType dtype : kDtypes) {
    for (const Layout& layout : layouts()) {
      for (kernel::BinaryOp op : kBinaryOps) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(layout.name);
        CAPTURE(static_cast<int>(op));
        Operand a = operand(layout, binary_base(layout.base, dtype, op, true, gen));
        // b in NCHW while a and out follow the layout: mixed strides in one launch.
        Operand b = operand(layouts()[0], binary_base(kSizes, dtype, op, false, gen));
        Tensor out = poisoned_output(layout, dtype), expected = reference_output(kSizes, dtype);
        cuda::binary(out.strided(), a.gpu.strided(), b.gpu.strided(), op);
        cpu::binary(expected.strided(), a.cpu.strided(), b.cpu.strided(), op);
        check_matches(out, expected);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("Equal is exactly 1 where the operands are equal and 0 elsewhere") {
  Tensor a = tensor({1, 2, 3, -0.0, 5}, {5}).to(testing::test_gpu());
  Tensor b = tensor({1, 0, 3, 0.0, 4}, {5}).to(testing::test_gpu());
  Tensor out = full({5}, kNaN, {.device = testing::test_gpu()});
  cuda::binary(out.strided(), a.strided(), b.strided(), cuda::BinaryOp::Equal);
  CHECK(testing::values(out) == std::vector<double>{1, 0, 1, 1, 0});
}

LOOM_GPU_TEST_CASE("binary_scalar matches the CPU with the scalar on either side") {
  Generator gen(103);
  const kernel::BinaryOp ops[] = {kernel::BinaryOp::Add, kernel::BinaryOp::Sub,         kernel::BinaryOp::Mul,
                                  kernel::BinaryOp::Div, kernel::BinaryOp::Pow,         kernel::BinaryOp::FloorDivide,
                                  kernel::BinaryOp::Remainder};
  for (DType dtype : kDtypes) {
    for (const Layout& layout : layouts()) {
      for (kernel::BinaryOp op : ops) {
        for (bool scalar_first : {false, true}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(layout.name);
          CAPTURE(static_cast<int>(op));
          CAPTURE(scalar_first);
          Operand a = operand(layout, random_base(layout.base, dtype, true, gen));
          Tensor out = poisoned_output(layout, dtype), expected = reference_output(kSizes, dtype);
          cuda::binary_scalar(out.strided(), a.gpu.strided(), 1.7, op, scalar_first);
          cpu::binary_scalar(expected.strided(), a.cpu.strided(), 1.7, op, scalar_first);
          check_matches(out, expected);
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("scalar_first puts the scalar on the left: 2 - x and 1 / x") {
  Tensor x = tensor({1, 4, -0.5}, {3}).to(testing::test_gpu());
  Tensor out = full({3}, kNaN, {.device = testing::test_gpu()});
  cuda::binary_scalar(out.strided(), x.strided(), 2.0, cuda::BinaryOp::Sub, true);
  CHECK(testing::values(out) == std::vector<double>{1, -2, 2.5});
  cuda::binary_scalar(out.strided(), x.strided(), 1.0, cuda::BinaryOp::Div, true);
  CHECK(testing::values(out) == std::vector<double>{1, 0.25, -2});
  cuda::binary_scalar(out.strided(), x.strided(), 2.0, cuda::BinaryOp::Sub, false);
  CHECK(testing::values(out) == std::vector<double>{-1, 2, -2.5});
}

LOOM_GPU_TEST_CASE("add_scaled, clamp and clamp_backward match the CPU for every dtype and layout") {
  Generator gen(104);
  for (DType dtype : kDtypes) {
    for (const Layout& layout : layouts()) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(layout.name);
      Operand a = operand(layout, random_base(layout.base, dtype, false, gen));
      Operand b = operand(layout, random_base(layout.base, dtype, false, gen));
      Tensor out = poisoned_output(layout, dtype), expected = reference_output(kSizes, dtype);
      cuda::add_scaled(out.strided(), a.gpu.strided(), b.gpu.strided(), -0.3);
      cpu::add_scaled(expected.strided(), a.cpu.strided(), b.cpu.strided(), -0.3);
      check_matches(out, expected);

      out = poisoned_output(layout, dtype);
      cuda::clamp(out.strided(), a.gpu.strided(), -0.5, 0.7);
      cpu::clamp(expected.strided(), a.cpu.strided(), -0.5, 0.7);
      check_matches(out, expected);

      out = poisoned_output(layout, dtype);
      cuda::clamp_backward(out.strided(), b.gpu.strided(), a.gpu.strided(), -0.5, 0.7);
      cpu::clamp_backward(expected.strided(), b.cpu.strided(), a.cpu.strided(), -0.5, 0.7);
      check_matches(out, expected);
    }
  }
}

// The batch norm's residual add and activation in one pass (core/ops/fused.cc), in place as it runs there.
LOOM_GPU_TEST_CASE("add_activation matches the CPU for every activation row, dtype and layout, and in place") {
  Generator gen(106);
  for (kernel::ActivationKind kind : kernel::kActivationKinds) {
    const kernel::ActivationParameters parameters = kernel::activation_info(kind).default_parameters;
    for (DType dtype : kDtypes) {
      for (const Layout& layout : layouts()) {
        CAPTURE(kernel::activation_info(kind).name);
        CAPTURE(dtype_name(dtype));
        CAPTURE(layout.name);
        Operand a = operand(layout, random_base(layout.base, dtype, false, gen) * 3.0);
        Operand b = operand(layout, random_base(layout.base, dtype, false, gen));
        Tensor out = poisoned_output(layout, dtype), expected = reference_output(kSizes, dtype);
        cuda::add_activation(out.strided(), a.gpu.strided(), b.gpu.strided(), kind, parameters);
        cpu::add_activation(expected.strided(), a.cpu.strided(), b.cpu.strided(), kind, parameters);
        check_matches(out, expected);
        cuda::add_activation(a.gpu.strided(), a.gpu.strided(), b.gpu.strided(), kind, parameters);
        check_matches(a.gpu, expected);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("add_scaled accumulates in place, as autograd uses it") {
  Generator gen(105);
  Tensor into = randn({3, 1000}, {}, &gen), grad = randn({3, 1000}, {}, &gen);
  Tensor expected = into.clone();
  cpu::add_scaled(expected.strided(), expected.strided(), grad.strided(), 1.0);
  Tensor on_gpu = into.to(testing::test_gpu());
  cuda::add_scaled(on_gpu.strided(), on_gpu.strided(), grad.to(testing::test_gpu()).strided(), 1.0);
  CHECK_CLOSE(on_gpu.cpu(), expected, 1e-6, 1e-7);
}

LOOM_GPU_TEST_CASE("broadcast operands (stride 0) read the same element for a whole dim") {
  Generator gen(106);
  for (DType dtype : kDtypes) {
    CAPTURE(dtype_name(dtype));
    Tensor a = randn(kSizes, {.dtype = dtype}, &gen);
    Tensor a_gpu = a.to(testing::test_gpu());
    // Expanded after the move, so the GPU operand keeps its zero strides.
    for (const Shape& source_sizes : {Shape{1, 3, 1, 7}, Shape{1}}) {
      CAPTURE(shape_str(source_sizes));
      Tensor source = randn(source_sizes, {.dtype = dtype}, &gen);
      Tensor b = source.expand(kSizes), b_gpu = source.to(testing::test_gpu()).expand(kSizes);
      Tensor out = full(kSizes, kNaN, {.dtype = dtype, .device = testing::test_gpu()});
      Tensor expected = reference_output(kSizes, dtype);
      cuda::add_scaled(out.strided(), a_gpu.strided(), b_gpu.strided(), 2.0);
      cpu::add_scaled(expected.strided(), a.strided(), b.strided(), 2.0);
      check_matches(out, expected);
      out.fill_(kNaN);
      cuda::binary(out.strided(), b_gpu.strided(), a_gpu.strided(), cuda::BinaryOp::Mul);
      cpu::binary(expected.strided(), b.strided(), a.strided(), kernel::BinaryOp::Mul);
      check_matches(out, expected);
    }
  }
}

// A channel slice [start, start + width) of a channels-last (n, channels, h, w)
// tensor: strided, and it goes by 16-byte packs when start and width are whole
// packs (the concatenations of a U-Net, and their gradients).
struct ChannelSlice {
  int64_t n, channels, h, w, start, width;
  Shape full() const { return {n, channels, h, w}; }
  Tensor of(const Tensor& t) const { return t.narrow(1, start, width); }
};

ChannelSlice random_channel_slice(std::mt19937& rng) {
  auto pick = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  ChannelSlice s{pick(1, 3), 8 * pick(1, 4), pick(1, 6), pick(1, 6), 0, 0};
  const bool whole_packs = pick(0, 3) > 0;  // mostly the packed path, sometimes the fallback
  s.start = whole_packs ? 8 * pick(0, s.channels / 8 - 1) : pick(0, s.channels - 1);
  s.width = whole_packs ? 8 * pick(1, (s.channels - s.start) / 8) : pick(1, s.channels - s.start);
  return s;
}

Tensor channels_last(const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }

// The slice of `out` (a poisoned GPU output) against the slice of `expected`,
// and every element outside the slice still NaN.
void check_slice(const Tensor& out, const Tensor& expected, const ChannelSlice& s, double rtol, double atol) {
  CHECK_CLOSE(s.of(out).cpu(), s.of(expected), rtol, atol);
  int64_t untouched = 0;
  for (double v : testing::values(out)) untouched += std::isnan(v) ? 1 : 0;
  CHECK(untouched == out.numel() - s.of(out).numel());
}

LOOM_GPU_TEST_CASE("channel slices of channels-last tensors: map, zip, copy and fill match the CPU") {
  std::mt19937 rng(108);
  Generator gen(108);
  for (int trial = 0; trial < 40; ++trial) {
    const ChannelSlice s = random_channel_slice(rng);
    for (DType dtype : kDtypes) {
      CAPTURE(trial);
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(s.full()));
      CAPTURE(s.start);
      CAPTURE(s.width);
      const Tensor a = channels_last(randn(s.full(), {.dtype = dtype}, &gen));
      const Tensor b = channels_last(randn(s.full(), {.dtype = dtype}, &gen));
      const Tensor bias = randn({1, s.channels, 1, 1}, {.dtype = dtype}, &gen);
      const Tensor a_gpu = a.to(testing::test_gpu()), b_gpu = b.to(testing::test_gpu());
      const Tensor bias_gpu = bias.to(testing::test_gpu());
      // Every op writes a slice of a poisoned channels-last output: the channels
      // outside it must stay NaN.
      auto poisoned = [&] { return channels_last(full(s.full(), kNaN, {.dtype = dtype, .device = testing::test_gpu()})); };
      Tensor out = poisoned(), expected = full(s.full(), kNaN, {.dtype = dtype});
      cuda::unary(s.of(out).strided(), s.of(a_gpu).strided(), kernel::UnaryOp::Exp);
      cpu::unary(s.of(expected).strided(), s.of(a).strided(), kernel::UnaryOp::Exp);
      check_slice(out, expected, s, tolerance_for(dtype).rtol, tolerance_for(dtype).atol);
      out = poisoned();
      cuda::binary(s.of(out).strided(), s.of(a_gpu).strided(), b_gpu.narrow(1, 0, s.width).strided(),
                   cuda::BinaryOp::Mul);
      cpu::binary(s.of(expected).strided(), s.of(a).strided(), b.narrow(1, 0, s.width).strided(),
                  kernel::BinaryOp::Mul);
      check_slice(out, expected, s, tolerance_for(dtype).rtol, tolerance_for(dtype).atol);
      // A per-channel operand broadcast over the rows (stride 0 outside the channels).
      out = poisoned();
      const Shape sliced = s.of(a).sizes();
      cuda::binary(s.of(out).strided(), s.of(a_gpu).strided(), s.of(bias_gpu).expand(sliced).strided(),
                   cuda::BinaryOp::Add);
      cpu::binary(s.of(expected).strided(), s.of(a).strided(), s.of(bias).expand(sliced).strided(),
                  kernel::BinaryOp::Add);
      check_slice(out, expected, s, tolerance_for(dtype).rtol, tolerance_for(dtype).atol);
      // copy_ into a slice, from a slice and in another dtype; fill of a slice.
      out = poisoned();
      s.of(out).copy_(s.of(b_gpu));
      s.of(expected).copy_(s.of(b));
      check_slice(out, expected, s, 0, 0);
      out = poisoned();
      s.of(out).copy_(s.of(b_gpu).to(DType::BFloat16));
      s.of(expected).copy_(s.of(b).to(DType::BFloat16));
      check_slice(out, expected, s, 0, 0);
      out = poisoned();
      s.of(out).fill_(0.0);
      s.of(expected).fill_(0.0);
      check_slice(out, expected, s, 0, 0);
    }
  }
}

LOOM_GPU_TEST_CASE("fill of dense tensors of every layout: zero, negative zero and other values") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::Bool}) {
    CAPTURE(dtype_name(dtype));
    for (double value : {0.0, -0.0, 1.5}) {
      CAPTURE(value);
      Tensor t = full({2, 8, 3, 5}, 7.0, {.dtype = dtype, .device = testing::test_gpu()});
      Tensor cl = channels_last(t);
      t.fill_(value);
      cl.fill_(value);
      const Tensor expected = full({2, 8, 3, 5}, value, {.dtype = dtype});
      CHECK_CLOSE(t.cpu(), expected, 0, 0);
      CHECK_CLOSE(cl.cpu(), expected, 0, 0);
      if (dtype == DType::Float32 || dtype == DType::Float64) {
        // -0.0 compares equal to 0.0: check its sign bit survived.
        CHECK(std::signbit(cl.cpu().to(DType::Float64).to_vector<double>()[5]) == std::signbit(value));
      }
    }
  }
}

LOOM_GPU_TEST_CASE("odd sizes and empty tensors: 1, 7 and 1000003 elements, and none") {
  Generator gen(107);
  const Shape sizes[] = {{1}, {7}, {1000003}, {0}, {2, 0, 5, 7}, {}};
  for (DType dtype : kDtypes) {
    for (const Shape& s : sizes) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(s));
      Tensor a = randn(s, {.dtype = dtype}, &gen), b = randn(s, {.dtype = dtype}, &gen);
      Tensor a_gpu = a.to(testing::test_gpu()), b_gpu = b.to(testing::test_gpu());
      Tensor out = full(s, kNaN, {.dtype = dtype, .device = testing::test_gpu()});
      Tensor expected = reference_output(s, dtype);
      cuda::activation_forward(out.strided(), a_gpu.strided(), kernel::ActivationKind::Gelu, kernel::act::Gelu::info.default_parameters);
      cpu::activation_forward(expected.strided(), a.strided(), kernel::ActivationKind::Gelu, kernel::act::Gelu::info.default_parameters);
      check_matches(out, expected);
      out.fill_(kNaN);
      cuda::activation_backward(out.strided(), a_gpu.strided(), b_gpu.strided(), kernel::ActivationKind::Gelu, kernel::act::Gelu::info.default_parameters);
      cpu::activation_backward(expected.strided(), a.strided(), b.strided(), kernel::ActivationKind::Gelu, kernel::act::Gelu::info.default_parameters);
      check_matches(out, expected);
    }
  }
}

LOOM_GPU_TEST_CASE("NaN: relu and clamp keep it, clamp_backward passes no gradient for it") {
  // Hand-checked with lo = -1, hi = 2; the bounds themselves pass the gradient.
  for (DType dtype : kDtypes) {
    CAPTURE(dtype_name(dtype));
    const TensorOptions options = {.dtype = dtype, .device = testing::test_gpu()};
    Tensor x = tensor({kNaN, -2, -1, 0, 1, 2, 3}, {7}, {.dtype = dtype}).to(testing::test_gpu());
    Tensor dy = tensor({10, 11, 12, 13, 14, 15, 16}, {7}, {.dtype = dtype}).to(testing::test_gpu());
    Tensor out = full({7}, kNaN, options);
    cuda::activation_forward(out.strided(), x.strided(), kernel::ActivationKind::Relu, kernel::act::Relu::info.default_parameters);
    std::vector<double> relu = testing::values(out);
    CHECK(std::isnan(relu[0]));
    CHECK(std::vector<double>(relu.begin() + 1, relu.end()) == std::vector<double>{0, 0, 0, 1, 2, 3});
    cuda::clamp(out.strided(), x.strided(), -1, 2);
    std::vector<double> clamped = testing::values(out);
    CHECK(std::isnan(clamped[0]));
    CHECK(std::vector<double>(clamped.begin() + 1, clamped.end()) ==
          std::vector<double>{-1, -1, 0, 1, 2, 2});
    cuda::clamp_backward(out.strided(), dy.strided(), x.strided(), -1, 2);
    CHECK(testing::values(out) == std::vector<double>{0, 0, 12, 13, 14, 15, 0});
  }
}

// Full-range integers (about a quarter near the type's ends) of `dtype`, wrapped from int64.
Tensor random_integers(const Shape& sizes, DType dtype, std::mt19937_64& rng) {
  std::vector<int64_t> values(static_cast<size_t>(numel_of(sizes)));
  for (int64_t& v : values) v = static_cast<int64_t>(rng() % 4 == 0 ? ~uint64_t{0} - rng() % 3 : rng());
  return from_host(values.data(), DType::Int64, sizes, {.dtype = dtype});
}

// Runs one kernel into two GPU outputs poisoned with different values: both must
// equal the CPU's, so an element the kernel leaves unwritten cannot pass by chance.
void check_integer_kernel(const Layout& layout, DType dtype, const Tensor& expected,
                          const std::function<void(const Tensor&)>& run) {
  for (double poison : {85.0, 170.0}) {
    Tensor out = layout.view(full(layout.base, poison, {.dtype = dtype, .device = testing::test_gpu()}));
    run(out);
    CHECK(out.cpu().to_vector<int64_t>() == expected.to_vector<int64_t>());
  }
}

LOOM_GPU_TEST_CASE("integer kernels (int32, int64, uint8) wrap around exactly as the CPU's, every layout") {
  std::mt19937_64 rng(103);
  for (DType dtype : {DType::UInt8, DType::Int32, DType::Int64}) {
    for (const Layout& layout : layouts()) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(layout.name);
      Operand a = operand(layout, random_integers(layout.base, dtype, rng));
      Operand b = operand(layout, random_integers(layout.base, dtype, rng));
      for (kernel::UnaryOp op : kIntegerUnaryOps) {
        CAPTURE(static_cast<int>(op));
        Tensor expected = reference_output(kSizes, dtype);
        cpu::unary(expected.strided(), a.cpu.strided(), op);
        check_integer_kernel(layout, dtype, expected, [&](const Tensor& out) {
          cuda::unary(out.strided(), a.gpu.strided(), op);
        });
      }
      for (kernel::BinaryOp op : kIntegerBinaryOps) {
        CAPTURE(static_cast<int>(op));
        Tensor expected = reference_output(kSizes, dtype);
        cpu::binary(expected.strided(), a.cpu.strided(), b.cpu.strided(), op);
        check_integer_kernel(layout, dtype, expected, [&](const Tensor& out) {
          cuda::binary(out.strided(), a.gpu.strided(), b.gpu.strided(), op);
        });
      }
      for (double scalar : {-300.0, 7.0, 1e15}) {
        CAPTURE(scalar);
        // 1e15 is 0 in uint8 (a zero divisor: 0 on both devices).
        for (kernel::BinaryOp op :
             {kernel::BinaryOp::Sub, kernel::BinaryOp::FloorDivide, kernel::BinaryOp::Remainder}) {
          for (bool first : {false, true}) {
            CAPTURE(static_cast<int>(op));
            Tensor expected = reference_output(kSizes, dtype);
            cpu::binary_scalar(expected.strided(), a.cpu.strided(), scalar, op, first);
            check_integer_kernel(layout, dtype, expected, [&](const Tensor& out) {
              cuda::binary_scalar(out.strided(), a.gpu.strided(), scalar, op, first);
            });
          }
        }
        Tensor expected = reference_output(kSizes, dtype);
        cpu::add_scaled(expected.strided(), a.cpu.strided(), b.cpu.strided(), scalar);
        check_integer_kernel(layout, dtype, expected, [&](const Tensor& out) {
          cuda::add_scaled(out.strided(), a.gpu.strided(), b.gpu.strided(), scalar);
        });
      }
    }
  }
}

// Hand values (torch's) on the GPU, which the CPU tests check there too.
LOOM_GPU_TEST_CASE("rounding, sin and Python's division on the GPU: torch's values") {
  const Device gpu = testing::test_gpu();
  for (DType dtype : kDtypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = tensor({0.5, 1.5, 2.5, -0.5, -2.5, 2.6, -0.2}, {7}, {.dtype = dtype}).to(gpu);
    CHECK(testing::values(round(x)) == std::vector<double>{0, 2, 2, -0.0, -2, 3, -0.0});
    CHECK(testing::values(floor(x)) == std::vector<double>{0, 1, 2, -1, -3, 2, -1});
    CHECK(testing::values(ceil(x)) == std::vector<double>{1, 2, 3, -0.0, -2, 3, -0.0});
    CHECK(testing::values(trunc(x)) == std::vector<double>{0, 1, 2, -0.0, -2, 2, -0.0});
    const Tensor a = tensor({-3, 3, -7, 1, 1}, {5}, {.dtype = dtype}).to(gpu);
    const Tensor b = tensor({2, -2, 2, 0.1, 0}, {5}, {.dtype = dtype}).to(gpu);
    const std::vector<double> quotient = testing::values(floor_divide(a, b)), rest = testing::values(remainder(a, b));
    CHECK(std::vector<double>(quotient.begin(), quotient.end() - 1) == std::vector<double>{-2, -2, -4, 9});
    CHECK(quotient.back() == std::numeric_limits<double>::infinity());
    CHECK(std::vector<double>(rest.begin(), rest.begin() + 3) == std::vector<double>{1, -1, 1});
    CHECK(std::isnan(rest.back()));
    CHECK_CLOSE(sin(x).cpu(), sin(x.cpu()), 1e-6, 1e-7);
  }
  const Tensor labels = tensor({7, -3, 0, 250}, {4}, {.dtype = DType::Int64}).to(gpu);
  CHECK(sin(labels).dtype() == DType::Float32);
  CHECK(floor(labels).dtype() == DType::Int64);
  // A zero in a GPU divisor tensor is not checked (that would wait for the GPU): both give 0 there.
  const Tensor divisor = tensor({2, 0, 0, -7}, {4}, {.dtype = DType::Int64}).to(gpu);
  CHECK(floor_divide(labels, divisor).cpu().to_vector<int64_t>() == std::vector<int64_t>{3, 0, 0, -36});
  CHECK(remainder(labels, divisor).cpu().to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, -2});
  CHECK_THROWS_WITH_FRAGMENT(labels % 0.0, ValueError, "[remainder] integer division by zero");  // a number is checked
  const int64_t lo = std::numeric_limits<int64_t>::min();
  const Tensor extremes =
      from_host(std::vector<int64_t>{lo, lo, lo}.data(), DType::Int64, {3}, {.dtype = DType::Int64, .device = gpu});
  const Tensor by = tensor({-1, 3, -7}, {3}, {.dtype = DType::Int64}).to(gpu);
  CHECK(floor_divide(extremes, by).cpu().to_vector<int64_t>() ==
        std::vector<int64_t>{lo, -3074457345618258603, 1317624576693539401});
  CHECK(remainder(extremes, by).cpu().to_vector<int64_t>() == std::vector<int64_t>{0, 1, -1});
}

LOOM_GPU_TEST_CASE("integer ops on the GPU: dtypes, promotion and results as on the CPU") {
  const Device gpu = testing::test_gpu();
  const Tensor labels = tensor({7, -3, 0, 250}, {4}, {.dtype = DType::Int64});
  const Tensor pixels = tensor({250, 0, 17, 3}, {4}, {.dtype = DType::UInt8});
  const Tensor mask = tensor({1, 0, 1, 1}, {4}, {.dtype = DType::Bool});
  const std::vector<std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>> programs = {
      [](const Tensor& l, const Tensor&, const Tensor&) { return l + 1.0; },
      [](const Tensor& l, const Tensor&, const Tensor&) { return -l * l - 2.0 * l; },
      [](const Tensor& l, const Tensor&, const Tensor&) { return pow(abs(l), 3.0); },
      [](const Tensor&, const Tensor& p, const Tensor&) { return p + 10.0; },
      [](const Tensor&, const Tensor& p, const Tensor&) { return 1.0 - p; },
      [](const Tensor& l, const Tensor& p, const Tensor&) { return p * l; },
      [](const Tensor& l, const Tensor&, const Tensor& m) { return m + l; },
      [](const Tensor&, const Tensor&, const Tensor& m) { return m * 3.0; },
      [](const Tensor& l, const Tensor&, const Tensor&) { return floor_divide(l, -4.0) + l % 3.0; },
      [](const Tensor& l, const Tensor& p, const Tensor&) { return floor_divide(l, l * 2.0 + 1.0) + p % 9.0; },
      [](const Tensor& l, const Tensor& p, const Tensor&) { return remainder(p, l * 2.0 - 1.0) + round(l) + trunc(p); },
      [](const Tensor& l, const Tensor& p, const Tensor&) {
        Tensor c = l.clone();
        c += p;
        c *= 5.0;
        return c;
      },
  };
  for (size_t i = 0; i < programs.size(); ++i) {
    CAPTURE(i);
    const Tensor on_cpu = programs[i](labels, pixels, mask);
    const Tensor on_gpu = programs[i](labels.to(gpu), pixels.to(gpu), mask.to(gpu));
    CHECK(on_gpu.device() == gpu);
    CHECK(on_gpu.dtype() == on_cpu.dtype());
    CHECK(on_gpu.cpu().to_vector<int64_t>() == on_cpu.to_vector<int64_t>());
  }
}

LOOM_GPU_TEST_CASE("more than 8 dims is a ValueError naming the op") {
  Tensor x = empty({1, 1, 1, 1, 1, 1, 1, 1, 2}, {.device = testing::test_gpu()});
  Tensor out = empty_like(x);
  CHECK_THROWS_WITH_FRAGMENT(cuda::unary(out.strided(), x.strided(), cuda::UnaryOp::Exp),
                             ValueError, "[unary] CUDA kernels take at most 8 dims");
}
#endif  // LOOM_WITH_CUDA
