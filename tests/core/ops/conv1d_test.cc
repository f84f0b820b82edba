// File: tests/core/ops/conv1d_test.cc
// conv1d: a hand case, a direct 1-D convolution over random configurations
// (groups, strides, paddings, dilations, bias, NCL, length-major and sliced
// inputs, float32 and float64), unbatched inputs, the output layout,
// gradcheck, and the argument errors.
//
// N batch, C in channels, L length, K out channels, R filter, G groups.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/conv.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kFloat64 = {.dtype = DType::Float64};

// y[n, k, i] = b[k] + sum over c, r of x[n, g Cg + c, i stride - pad + r dilation] w[k, c, r],
// g = k / (K / G), by its definition; positions outside x read 0.
Tensor naive_conv1d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dOptions& o) {
  const int64_t n_ = x.size(0), l_ = x.size(2), k_ = w.size(0), cg = w.size(1), r_ = w.size(2);
  const int64_t out = (l_ + 2 * o.padding - o.dilation * (r_ - 1) - 1) / o.stride + 1, kg = k_ / o.groups;
  const std::vector<double> xv = x.contiguous().to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(k_, 0.0);
  std::vector<double> y(n_ * k_ * out, 0.0);
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t k = 0; k < k_; ++k)
      for (int64_t i = 0; i < out; ++i) {
        double acc = bv[k];
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t r = 0; r < r_; ++r) {
            const int64_t at = i * o.stride - o.padding + r * o.dilation;
            if (at < 0 || at >= l_) continue;
            acc += xv[(n * x.size(1) + k / kg * cg + c) * l_ + at] * wv[(k * cg + c) * r_ + r];
          }
        y[(n * k_ + k) * out + i] = acc;
      }
  return tensor(y, {n_, k_, out}, kFloat64);
}

struct Config1d {
  Shape x, w;
  Conv1dOptions options;
  bool bias;
};

// Groups of 1, 2, 3 or depthwise, filters up to 7 taps, and a length that
// leaves at least one output.
Config1d random_config(std::mt19937_64& rng) {
  auto between = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t kind = between(0, 3);
  const int64_t groups = kind == 0 ? 1 : kind == 1 ? 2 : kind == 2 ? 3 : between(1, 6);
  const int64_t c = kind == 3 ? groups : groups * between(1, 4);
  const int64_t k = groups * between(1, 3), r = between(1, 7);
  Conv1dOptions o{.stride = between(1, 3), .padding = between(0, 3), .dilation = between(1, 3), .groups = groups};
  const int64_t extent = o.dilation * (r - 1) + 1;
  const int64_t l = std::max<int64_t>(between(1, 30), std::max<int64_t>(1, extent - 2 * o.padding));
  return {{between(1, 3), c, l}, {k, c / groups, r}, o, between(0, 1) == 1};
}

// x (N, C, L) in one of three layouts with x's values: NCL, length-major
// (x (N, L, C) transposed) or a strided slice of a longer tensor.
Tensor in_layout(const Tensor& x, int64_t layout, Generator& gen) {
  if (layout == 1) return x.transpose(1, 2).contiguous().transpose(1, 2);
  if (layout == 2) {
    Tensor wide = randn({x.size(0), x.size(1), 2 * x.size(2)}, {.dtype = x.dtype()}, &gen);
    Tensor slice = wide.slice(2, 0, 2 * x.size(2), 2);
    slice.copy_(x);
    return slice;
  }
  return x;
}

TEST_CASE("conv1d: a signal and a two-tap filter, by hand") {
  const Tensor x = tensor({1, 2, 4, 7}, {1, 1, 4}, kFloat64);
  const Tensor w = tensor({1, -1}, {1, 1, 2}, kFloat64);
  CHECK(conv1d(x, w).to_vector<double>() == std::vector<double>{-1, -2, -3});
  CHECK(conv1d(x, w, tensor({0.5}, {1}, kFloat64), {.padding = 1}).to_vector<double>() ==
        std::vector<double>{-0.5, -0.5, -1.5, -2.5, 7.5});
  CHECK(conv1d(x, w, Tensor(), {.stride = 2, .dilation = 2}).to_vector<double>() == std::vector<double>{-3});
}

TEST_CASE("conv1d: random configurations match the direct convolution in every layout") {
  std::mt19937_64 rng(41);
  Generator gen(42);
  for (int trial = 0; trial < 60; ++trial) {
    const Config1d cfg = random_config(rng);
    const DType dtype = trial % 3 == 0 ? DType::Float32 : DType::Float64;
    const int64_t layout = trial % 3;
    CAPTURE(trial);
    CAPTURE(shape_str(cfg.x));
    CAPTURE(shape_str(cfg.w));
    const Tensor x = randn(cfg.x, kFloat64, &gen), w = randn(cfg.w, kFloat64, &gen);
    const Tensor b = cfg.bias ? randn({cfg.w[0]}, kFloat64, &gen) : Tensor();
    const Tensor y = conv1d(in_layout(x.to(dtype), layout, gen), w.to(dtype), b.defined() ? b.to(dtype) : b,
                            cfg.options);
    const double tol = dtype == DType::Float32 ? 1e-5 : 1e-12;
    CHECK_CLOSE(y.to(DType::Float64), naive_conv1d(x, w, b, cfg.options), tol, tol);
  }
}

TEST_CASE("conv1d: gradcheck of input, weight and bias over random configurations") {
  std::mt19937_64 rng(43);
  Generator gen(44);
  for (int trial = 0; trial < 12; ++trial) {
    const Config1d cfg = random_config(rng);
    CAPTURE(shape_str(cfg.x));
    CAPTURE(shape_str(cfg.w));
    const Tensor x = in_layout(randn(cfg.x, kFloat64, &gen), trial % 2, gen).detach().requires_grad_();
    const Tensor w = randn(cfg.w, kFloat64, &gen).requires_grad_();
    const Tensor b = randn({cfg.w[0]}, kFloat64, &gen).requires_grad_();
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], in[2], cfg.options); }, {x, w, b});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("conv1d: one sample (C, L) gives (K, L'), as the batch of one") {
  Generator gen(45);
  const Tensor x = randn({3, 11}, kFloat64, &gen).requires_grad_();
  const Tensor w = randn({4, 3, 3}, kFloat64, &gen), b = randn({4}, kFloat64, &gen);
  const Tensor y = conv1d(x, w, b, {.stride = 2, .padding = 1});
  CHECK(y.sizes() == Shape{4, 6});
  CHECK_CLOSE(y, conv1d(x.unsqueeze(0), w, b, {.stride = 2, .padding = 1}).squeeze(0), 0, 0);
  sum(y).backward();
  CHECK(x.grad().sizes() == x.sizes());
}

TEST_CASE("conv1d: the output is contiguous for an NCL input and length-major for a length-major one") {
  Generator gen(46);
  const Tensor w = randn({5, 4, 3}, {}, &gen);
  const Tensor x = randn({2, 4, 9}, {}, &gen);
  CHECK(conv1d(x, w).is_contiguous());
  const Tensor length_major = x.transpose(1, 2).contiguous().transpose(1, 2);
  const Tensor y = conv1d(length_major, w);
  CHECK(y.stride(1) == 1);
  CHECK_FALSE(y.is_contiguous());
  CHECK_CLOSE(y, conv1d(x, w), 1e-6, 1e-6);
  // One input channel: nothing says length-major, so the output is NCL.
  CHECK(conv1d(randn({2, 1, 9}, {}, &gen), randn({5, 1, 3}, {}, &gen)).is_contiguous());
}

TEST_CASE("conv1d: bad arguments name conv1d and print the values") {
  const Tensor x = zeros({2, 4, 8}), w = zeros({6, 4, 3});
  CHECK_THROWS_WITH_FRAGMENT(
      conv1d(zeros({2, 4, 8, 8}), w), ShapeError,
      "[conv1d] expected a 3-D input (N, C, L) or one 2-D sample (C, L), got shape (2, 4, 8, 8)");
  CHECK_THROWS_WITH_FRAGMENT(conv1d(x, zeros({6, 4, 3, 3})), ShapeError,
                             "[conv1d] expected a 3-D weight (K, C/groups, R) with a non-empty filter, got shape "
                             "(6, 4, 3, 3)");
  CHECK_THROWS_WITH_FRAGMENT(conv1d(x, zeros({6, 3, 3})), ShapeError,
                             "[conv1d] input (2, 4, 8) and weight (6, 3, 3) do not match with groups=1");
  CHECK_THROWS_WITH_FRAGMENT(conv1d(x, zeros({6, 1, 3}), Tensor(), {.groups = 3}), ShapeError,
                             "do not match with groups=3");
  CHECK_THROWS_WITH_FRAGMENT(conv1d(x, zeros({6, 4, 9})), ShapeError,
                             "[conv1d] input (2, 4, 8) with a filter of 9, padding 0 and dilation 1 gives an empty "
                             "output (0)");
  CHECK_THROWS_WITH_FRAGMENT(conv1d(x, w, Tensor(), {.stride = 0}), ValueError, "got stride 0");
  CHECK_THROWS_WITH_FRAGMENT(conv1d(x, w, Tensor(), {.padding = -1}), ValueError, "padding -1");
  CHECK_THROWS_WITH_FRAGMENT(conv1d(x, w, zeros({5})), ShapeError, "bias must have shape (6,)");
  CHECK_THROWS_WITH_FRAGMENT(conv1d(Tensor(), w), ValueError, "[conv1d] input and weight must be defined");
}

}  // namespace
}  // namespace loom
