// File: tests/core/ops/conv_test.cc
// conv2d: a hand-computed case, a direct-convolution reference (forward and
// gradients) over a grid of strides, paddings, dilations, groups and layouts,
// gradcheck, and the argument errors.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output,
// G groups.
#include "core/ops/conv.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kFloat64 = {.dtype = DType::Float64};

// ---- the reference: convolution by its definition -----------------------------

struct ConvReference {
  Shape y_sizes;
  std::vector<double> y, dx, dw, db;  // row-major; grads for the given dy
};

int64_t reference_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                              int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// y[n, k, p, q] = b[k] + sum over c, r, s of x[n, g Cg + c, ih, iw] w[k, c, r, s]
// with ih = p stride - pad + r dilation (likewise iw) and g = k / (K / G); every
// term also feeds dx and dw by the product rule. `dy` may be empty (forward only).
ConvReference naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
                           const Conv2dOptions& o) {
  int64_t n_ = x.size(0), c_ = x.size(1), h_ = x.size(2), w_ = x.size(3);
  int64_t k_ = w.size(0), cg = w.size(1), r_ = w.size(2), s_ = w.size(3), kg = k_ / o.groups;
  int64_t p_ = reference_output_size(h_, r_, o.stride.h, o.padding.h, o.dilation.h);
  int64_t q_ = reference_output_size(w_, s_, o.stride.w, o.padding.w, o.dilation.w);
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> gy =
      dy.defined() ? dy.to_vector<double>() : std::vector<double>(n_ * k_ * p_ * q_, 0.0);
  ConvReference ref{{n_, k_, p_, q_},
                    std::vector<double>(n_ * k_ * p_ * q_, 0.0),
                    std::vector<double>(xv.size(), 0.0),
                    std::vector<double>(wv.size(), 0.0),
                    std::vector<double>(k_, 0.0)};
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(k_, 0.0);
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t k = 0; k < k_; ++k)
      for (int64_t p = 0; p < p_; ++p)
        for (int64_t q = 0; q < q_; ++q) {
          int64_t yi = ((n * k_ + k) * p_ + p) * q_ + q;
          ref.y[yi] = bv[k];
          ref.db[k] += gy[yi];
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t r = 0; r < r_; ++r)
              for (int64_t s = 0; s < s_; ++s) {
                int64_t ih = p * o.stride.h - o.padding.h + r * o.dilation.h;
                int64_t iw = q * o.stride.w - o.padding.w + s * o.dilation.w;
                if (ih < 0 || ih >= h_ || iw < 0 || iw >= w_) continue;
                int64_t xi = ((n * c_ + (k / kg) * cg + c) * h_ + ih) * w_ + iw;
                int64_t wi = ((k * cg + c) * r_ + r) * s_ + s;
                ref.y[yi] += xv[xi] * wv[wi];
                ref.dx[xi] += gy[yi] * wv[wi];
                ref.dw[wi] += gy[yi] * xv[xi];
              }
        }
  return ref;
}

// ---- inputs in each layout ----------------------------------------------------------

enum class Layout { Nchw, ChannelsLast, Sliced };

std::string layout_name(Layout layout) {
  switch (layout) {
    case Layout::Nchw:
      return "nchw";
    case Layout::ChannelsLast:
      return "channels_last";
    case Layout::Sliced:
      return "sliced";
  }
  return "?";
}

// A leaf (N, C, H, W) tensor whose memory is laid out as `layout`: the sliced one
// takes every other column of a wider tensor, so no stride is dense.
Tensor make_input(const Shape& sizes, Layout layout, TensorOptions options, Generator& gen) {
  switch (layout) {
    case Layout::Nchw:
      return randn(sizes, options, &gen);
    case Layout::ChannelsLast:
      return randn(sizes, options, &gen).contiguous(MemoryFormat::ChannelsLast);
    case Layout::Sliced: {
      Shape wide = {sizes[0], sizes[1], sizes[2], 2 * sizes[3]};
      return randn(wide, options, &gen).slice(3, 0, wide[3], 2);
    }
  }
  return Tensor();
}

Tensor as_tensor(const std::vector<double>& values, const Shape& sizes) {
  return tensor(values, sizes, kFloat64);
}

struct GridCase {
  int64_t stride, padding, dilation, groups;
  bool bias;
  Layout layout;

  std::string str() const {
    return fmt::format("stride {} padding {} dilation {} groups {} bias {} layout {}", stride,
                       padding, dilation, groups, bias, layout_name(layout));
  }
};

// Forward and all three gradients of one case against the reference.
void check_case(const GridCase& gc, DType dtype, uint64_t seed) {
  INFO(gc.str(), " dtype ", dtype_name(dtype));
  Generator gen(seed);
  TensorOptions options{.dtype = dtype};
  const int64_t channels = 4, out_channels = 8;
  Tensor x = make_input({2, channels, 7, 6}, gc.layout, options, gen).requires_grad_();
  Tensor w = randn({out_channels, channels / gc.groups, 3, 2}, options, &gen).requires_grad_();
  Tensor b = gc.bias ? randn({out_channels}, options, &gen).requires_grad_() : Tensor();
  Conv2dOptions o{
      .stride = gc.stride, .padding = gc.padding, .dilation = gc.dilation, .groups = gc.groups};

  Tensor y = conv2d(x, w, b, o);
  Tensor dy = randn(y.sizes(), options, &gen);
  ConvReference ref = naive_conv2d(x, w, b, dy, o);
  double tol = dtype == DType::Float32 ? 1e-4 : 1e-10;
  CHECK_CLOSE(y, as_tensor(ref.y, ref.y_sizes), tol, tol);
  MemoryFormat expected_format =
      gc.layout == Layout::ChannelsLast ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  CHECK(y.is_contiguous(expected_format));

  y.backward(dy);
  CHECK_CLOSE(x.grad(), as_tensor(ref.dx, x.sizes()), tol, tol);
  CHECK(x.grad().is_contiguous(expected_format));  // dx comes back in y's layout
  CHECK_CLOSE(w.grad(), as_tensor(ref.dw, w.sizes()), tol, tol);
  if (gc.bias) CHECK_CLOSE(b.grad(), as_tensor(ref.db, b.sizes()), tol, tol);
}

}  // namespace

TEST_CASE("conv2d: a 3x3 image and a 2x2 filter, by hand") {
  // x = [[1, 2, 3],     w = [[1, 2],
  //      [4, 5, 6],          [3, 4]]
  //      [7, 8, 9]]
  Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor w = tensor({1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor b = tensor({0.5}, {1});

  // y[0][0] = 1*1 + 2*2 + 4*3 + 5*4 = 37, then 47, 67, 77; plus the bias.
  Tensor y = conv2d(x, w, b);
  CHECK_CLOSE(y, tensor({37.5, 47.5, 67.5, 77.5}, {1, 1, 2, 2}), 0, 1e-6);
  CHECK(y.grad_fn() == nullptr);  // nothing required grad

  // Padding 1, stride 2: output positions see rows/cols {-1, 0} and {1, 2}.
  //   y[0][0] = x[0][0] w[1][1] = 4          y[0][1] = 2*3 + 3*4 = 18
  //   y[1][0] = 4*2 + 7*4 = 36               y[1][1] = 5 + 12 + 24 + 36 = 77
  Tensor strided = conv2d(x, w, Tensor(), {.stride = {2, 2}, .padding = {1, 1}});
  CHECK_CLOSE(strided, tensor({4, 18, 36, 77}, {1, 1, 2, 2}), 0, 1e-6);

  // Dilation 2 on the 3x3 image: the filter taps the four corners only.
  Tensor dilated = conv2d(x, w, Tensor(), {.dilation = {2, 2}});
  CHECK_CLOSE(dilated, tensor({1 * 1 + 3 * 2 + 7 * 3 + 9 * 4}, {1, 1, 1, 1}), 0, 1e-6);
}

TEST_CASE("conv2d: gradients of the hand case") {
  // y = sum(conv(x, w)): dw[r][s] sums the 2x2 window of x at offset (r, s);
  // dx counts how often each pixel meets each tap.
  Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, kFloat64).requires_grad_();
  Tensor w = tensor({1, 2, 3, 4}, {1, 1, 2, 2}, kFloat64).requires_grad_();
  Tensor b = tensor({0.5}, {1}, kFloat64).requires_grad_();
  Tensor y = conv2d(x, w, b);
  y.backward(ones(y.sizes(), kFloat64));
  CHECK_CLOSE(w.grad(), tensor({12, 16, 24, 28}, {1, 1, 2, 2}), 0, 1e-12);
  CHECK_CLOSE(x.grad(), tensor({1, 3, 2, 4, 10, 6, 3, 7, 4}, {1, 1, 3, 3}), 0, 1e-12);
  CHECK_CLOSE(b.grad(), tensor({4}, {1}), 0, 1e-12);
}

TEST_CASE("conv2d: forward and gradients match the direct convolution over a grid") {
  uint64_t seed = 1;
  for (DType dtype : {DType::Float32, DType::Float64})
    for (int64_t stride : {1, 2})
      for (int64_t padding : {0, 1, 2})
        for (int64_t dilation : {1, 2})
          for (int64_t groups : {1, 2, 4})  // 4 = C: depthwise (2 filters per channel)
            for (bool bias : {false, true})
              for (Layout layout : {Layout::Nchw, Layout::ChannelsLast, Layout::Sliced}) {
                check_case({stride, padding, dilation, groups, bias, layout}, dtype, seed++);
              }
}

TEST_CASE("conv2d of an empty batch: an empty output and zero weight and bias gradients, as PyTorch") {
  Generator gen(12);
  for (const MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (const int64_t groups : {1, 3}) {
      CAPTURE(std::string(memory_format_name(format)));
      CAPTURE(groups);
      Tensor x = zeros({0, 3, 5, 6}).contiguous(format).requires_grad_();
      Tensor w = randn({6, 3 / groups, 3, 3}, {.requires_grad = true}, &gen);
      Tensor b = randn({6}, {.requires_grad = true}, &gen);
      const Tensor y = conv2d(x, w, b, {.stride = 2, .padding = 1, .groups = groups});
      CHECK(y.sizes() == Shape{0, 6, 3, 3});
      sum(y).backward();
      CHECK(x.grad().sizes() == x.sizes());
      CHECK(w.grad().to_vector<double>() == std::vector<double>(static_cast<size_t>(w.numel()), 0.0));
      CHECK(b.grad().to_vector<double>() == std::vector<double>(6, 0.0));
    }
  }
}

TEST_CASE("conv2d: different height and width parameters, and a 1x1 filter") {
  Generator gen(7);
  Tensor x = randn({2, 3, 6, 7}, kFloat64, &gen);
  Tensor w = randn({5, 3, 2, 3}, kFloat64, &gen);
  Conv2dOptions o{.stride = {2, 1}, .padding = {0, 2}, .dilation = {1, 2}};
  ConvReference ref = naive_conv2d(x, w, Tensor(), Tensor(), o);
  CHECK_CLOSE(conv2d(x, w, Tensor(), o), as_tensor(ref.y, ref.y_sizes), 1e-12, 1e-12);

  // 1x1, stride 1, no padding: the kernel's shortcut that skips im2col.
  Tensor pointwise = randn({4, 3, 1, 1}, kFloat64, &gen);
  ConvReference ref1 = naive_conv2d(x, pointwise, Tensor(), Tensor(), {});
  CHECK_CLOSE(conv2d(x, pointwise), as_tensor(ref1.y, ref1.y_sizes), 1e-12, 1e-12);
}

TEST_CASE("conv2d: a pair option is written as one int or as two") {
  Generator gen(17);
  Tensor x = randn({2, 2, 7, 6}, kFloat64, &gen);
  Tensor w = randn({3, 2, 3, 2}, kFloat64, &gen), b = randn({3}, kFloat64, &gen);
  const Conv2dOptions one_int{.stride = 2, .padding = 1, .dilation = 2};
  CHECK(one_int.stride == Size2(2, 2));
  CHECK(one_int.padding == Size2(1, 1));
  ConvReference ref = naive_conv2d(x, w, b, Tensor(), one_int);
  CHECK_CLOSE(conv2d(x, w, b, one_int), as_tensor(ref.y, ref.y_sizes), 1e-12, 1e-12);
  CHECK_CLOSE(conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 2}}),
              as_tensor(ref.y, ref.y_sizes), 1e-12, 1e-12);

  const Conv2dOptions two_ints{.stride = {1, 2}, .padding = {2, 0}};
  CHECK(two_ints.stride == Size2(1, 2));
  ConvReference ref2 = naive_conv2d(x, w, b, Tensor(), two_ints);
  Tensor y = conv2d(x, w, b, two_ints);
  CHECK(y.sizes() == Shape{2, 3, 9, 3});
  CHECK_CLOSE(y, as_tensor(ref2.y, ref2.y_sizes), 1e-12, 1e-12);
}

TEST_CASE("conv2d: the output layout follows PyTorch's choice") {
  Generator gen(8);
  Tensor x = randn({2, 3, 5, 5}, {}, &gen);
  Tensor w = randn({4, 3, 3, 3}, {}, &gen);
  Tensor w_last = w.contiguous(MemoryFormat::ChannelsLast);
  // A channels-last weight alone makes the output channels-last, as in PyTorch.
  Tensor y = conv2d(x, w_last);
  CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(y.is_contiguous());
  CHECK_CLOSE(y, conv2d(x, w), 1e-6, 1e-6);
  // One input channel: NCHW and NHWC strides coincide, so nothing suggests channels-last.
  Tensor single = randn({2, 1, 5, 5}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
  CHECK(conv2d(single, randn({4, 1, 3, 3}, {}, &gen)).is_contiguous());
}

TEST_CASE("conv2d: an empty batch gives an empty output") {
  Tensor y = conv2d(zeros({0, 3, 5, 5}), ones({4, 3, 3, 3}), ones({4}));
  CHECK(y.sizes() == Shape{0, 4, 3, 3});
}

TEST_CASE("conv2d: gradcheck for input, weight and bias") {
  struct Config {
    Shape x, w;
    Conv2dOptions options;
    bool channels_last;
  };
  std::vector<Config> configs = {
      {{2, 3, 5, 4}, {4, 3, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, false},
      {{1, 4, 6, 6}, {6, 2, 3, 2}, {.padding = {1, 0}, .dilation = {2, 2}, .groups = 2}, false},
      {{2, 3, 5, 5},
       {6, 1, 2, 2},
       {.stride = {2, 1}, .padding = {0, 1}, .dilation = {1, 2}, .groups = 3},
       true},
  };
  Generator gen(9);
  for (const Config& c : configs) {
    INFO("x ", shape_str(c.x), " w ", shape_str(c.w), " groups ", c.options.groups);
    Tensor x = randn(c.x, kFloat64, &gen);
    if (c.channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
    Tensor w = randn(c.w, kFloat64, &gen), b = randn({c.w[0]}, kFloat64, &gen);
    GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], c.options); },
        {x.requires_grad_(), w.requires_grad_(), b.requires_grad_()});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("conv2d: bad arguments name the op and print the values") {
  Tensor x = zeros({2, 3, 5, 5}), w = zeros({4, 3, 3, 3});
  CHECK_THROWS_WITH_FRAGMENT(conv2d(zeros({1, 1, 2, 2}), zeros({1, 1, 3, 3})), ShapeError,
                             "[conv2d] input (1, 1, 2, 2) with kernel 3x3, padding 0, dilation 1 "
                             "gives an empty output");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x, zeros({4, 1, 3, 3})), ShapeError,
                             "[conv2d] input has 3 channels but weight expects 1 (input (2, 3, 5, "
                             "5), weight (4, 1, 3, 3))");
  CHECK_THROWS_WITH_FRAGMENT(
      conv2d(zeros({1, 6, 5, 5}), zeros({4, 2, 3, 3}), Tensor(), {.groups = 4}), ShapeError,
      "groups=4 must divide the input channels, but input (1, 6, 5, 5) has 6");
  CHECK_THROWS_WITH_FRAGMENT(
      conv2d(zeros({1, 4, 5, 5}), zeros({3, 2, 3, 3}), Tensor(), {.groups = 2}), ShapeError,
      "must divide the output channels, but weight (3, 2, 3, 3) has 3");
  CHECK_THROWS_WITH_FRAGMENT(
      conv2d(zeros({1, 4, 5, 5}), zeros({4, 1, 3, 3}), Tensor(), {.groups = 2}), ShapeError,
      "weight expects 2 (input (1, 4, 5, 5), weight (4, 1, 3, 3), 1 per group x groups=2)");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(zeros({3, 5, 5}), w), ShapeError,
                             "expected a 4-D input (N, C, H, W), got shape (3, 5, 5)");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x, zeros({4, 3, 3})), ShapeError, "got shape (4, 3, 3)");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x, w, zeros({5})), ShapeError,
                             "bias must have shape (4,) to match the 4 output channels of weight "
                             "(4, 3, 3, 3), got (5,)");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x, w, Tensor(), {.stride = {0, 1}}), ValueError,
                             "[conv2d] stride must be positive, got (0, 1)");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x, w, Tensor(), {.dilation = {-1, -1}}), ValueError,
                             "dilation must be positive, got -1");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x, w, Tensor(), {.padding = {1, -1}}), ValueError,
                             "padding must be non-negative, got (1, -1)");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x, w, Tensor(), {.groups = 0}), ValueError,
                             "groups must be positive, got 0");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x, zeros({4, 3, 3, 3}, kFloat64)), TypeError,
                             "[conv2d] operands have different dtypes, float32");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x.to(DType::Int64), w), TypeError,
                             "[conv2d] input has dtype int64");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(x, w, zeros({4}, kFloat64)), TypeError, "float64 (4,)");
}

}  // namespace loom
