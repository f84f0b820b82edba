// File: tests/core/ops/pooling_test.cc
// max_pool2d, avg_pool2d and the global pools: hand-checked values, a naive window
// loop over a config grid and several layouts, gradcheck, and PyTorch's argument checks.
// N batch, C channels, H, W input plane, P, Q output plane.
#include "core/ops/pooling.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "tests/testing.h"

namespace loom {
namespace {

constexpr DType kF64 = DType::Float64;

// 1x1x4x4, distinct values, so each 2x2 window has one max.
const std::vector<double> kGrid4 = {
    1, 2, 5, 3,  //
    4, 0, 1, 8,  //
    7, 9, 2, 2,  //
    3, 6, 4, 1,
};
// 1x1x3x3: 1..9.
const std::vector<double> kGrid3 = {1, 2, 3, 4, 5, 6, 7, 8, 9};

std::vector<int64_t> int_values(const Tensor& t) { return t.to_vector<int64_t>(); }

// ---------------------------------------------------------------------------
// Naive reference: walk the windows, independent of the kernel's clipping logic.

// How many windows fit along one dim, found by walking the window starts. Floor mode:
// the window must end inside the right padding. Ceil mode: keep adding windows while
// the previous one left part of the padded input uncovered, but never one that
// starts in the right padding.
int64_t naive_windows(int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode) {
  int64_t count = 0;
  for (int64_t i = 0;; ++i) {
    const int64_t start = i * stride - pad;
    const bool fits = start + kernel <= in + pad;
    const bool previous_short = i > 0 && start - stride + kernel < in + pad;
    const bool keep = !ceil_mode ? fits : (i == 0 ? fits : previous_short && start < in);
    if (!keep) return count;
    ++count;
  }
}

struct NaivePool {
  Tensor values;                // (N, C, P, Q) float64
  std::vector<int64_t> argmax;  // row-major, flat h * W + w
};

NaivePool naive_pool(const Tensor& x, const Pool2dOptions& o, bool take_max) {
  const std::vector<double> in = x.to_vector<double>();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const auto [kh, kw] = o.kernel_size;
  const auto [sh, sw] = o.stride.value_or(o.kernel_size);
  const auto [ph, pw] = o.padding;
  const int64_t P = naive_windows(H, kh, sh, ph, o.ceil_mode);
  const int64_t Q = naive_windows(W, kw, sw, pw, o.ceil_mode);
  std::vector<double> values;
  NaivePool out;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t q = 0; q < Q; ++q) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t best_at = -1, inside = 0, padded = 0;
          for (int64_t i = 0; i < kh; ++i) {
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t h = p * sh - ph + i, w = q * sw - pw + j;
              if (h < H + ph && w < W + pw) ++padded;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              const double v = in[((n * C + c) * H + h) * W + w];
              ++inside;
              sum += v;
              if (v > best) {
                best = v;
                best_at = h * W + w;
              }
            }
          }
          values.push_back(take_max ? best : sum / (o.count_include_pad ? padded : inside));
          out.argmax.push_back(best_at);
        }
      }
    }
  }
  out.values = tensor(values, {N, C, P, Q}, {.dtype = kF64});
  return out;
}

// The same kind of random values in four layouts; the ops must accept any strides.
std::vector<std::pair<std::string, Tensor>> layouts(const Shape& sizes, DType dtype,
                                                    Generator& gen) {
  const int64_t N = sizes[0], C = sizes[1], H = sizes[2], W = sizes[3];
  const TensorOptions options = {.dtype = dtype};
  Tensor wide = randn({N, C, H, 2 * W}, options, &gen);
  return {
      {"nchw", randn(sizes, options, &gen)},
      {"channels_last", randn(sizes, options, &gen).contiguous(MemoryFormat::ChannelsLast)},
      {"sliced", wide.slice(3, 1, 2 * W, 2)},
      {"transposed", randn({N, C, W, H}, options, &gen).transpose(2, 3)},
  };
}

std::vector<Pool2dOptions> option_grid() {
  std::vector<Pool2dOptions> grid;
  for (int64_t k : {2, 3}) {
    for (int64_t s : {1, 2}) {
      for (int64_t p : {0, 1}) {
        for (bool ceil_mode : {false, true}) {
          for (bool count_include_pad : {true, false}) {
            grid.push_back({.kernel_size = {k, k},
                            .stride = {{s, s}},
                            .padding = {p, p},
                            .ceil_mode = ceil_mode,
                            .count_include_pad = count_include_pad});
          }
        }
      }
    }
  }
  return grid;
}

std::string options_str(const Pool2dOptions& o) {
  const auto stride = o.stride.value_or(o.kernel_size);
  return "kernel " + std::to_string(o.kernel_size[0]) + " stride " + std::to_string(stride[0]) +
         " pad " + std::to_string(o.padding[0]) + " ceil " + std::to_string(o.ceil_mode) +
         " count_include_pad " + std::to_string(o.count_include_pad);
}

Tensor requiring_grad(Tensor t) {
  t.requires_grad_(true);
  return t;
}

// ---------------------------------------------------------------------------
// Hand-checked cases.

TEST_CASE("max_pool2d: 2x2 windows of a 4x4 plane, by hand") {
  Tensor x = requiring_grad(tensor(kGrid4, {1, 1, 4, 4}));
  MaxPool2dResult r = max_pool2d_with_indices(x, {.kernel_size = {2, 2}});
  CHECK_CLOSE(r.values, tensor({4, 8, 9, 4}, {1, 1, 2, 2}), 0, 0);
  CHECK(int_values(r.indices) == std::vector<int64_t>{4, 7, 9, 14});
  CHECK(r.indices.dtype() == DType::Int64);
  // dy is a transposed view [[1, 3], [2, 4]]: backward must read it through its strides.
  r.values.backward(tensor({1, 2, 3, 4}, {1, 1, 2, 2}).transpose(2, 3));
  const std::vector<double> dx = {
      0, 0, 0, 0,  //
      1, 0, 0, 3,  //
      0, 2, 0, 0,  //
      0, 0, 4, 0,
  };
  CHECK_CLOSE(x.grad(), tensor(dx, {1, 1, 4, 4}), 0, 0);
  CHECK_CLOSE(max_pool2d(x, {.kernel_size = {2, 2}}), r.values, 0, 0);
}

TEST_CASE("max_pool2d: ties go to the first max, a NaN wins") {
  Tensor x = requiring_grad(full({1, 1, 2, 4}, 3.0));
  MaxPool2dResult r = max_pool2d_with_indices(x, {.kernel_size = {2, 2}});
  CHECK(int_values(r.indices) == std::vector<int64_t>{0, 2});
  r.values.backward(ones({1, 1, 1, 2}));
  CHECK_CLOSE(x.grad(), tensor({1, 0, 1, 0, 0, 0, 0, 0}, {1, 1, 2, 4}), 0, 0);

  const double nan = std::numeric_limits<double>::quiet_NaN();
  MaxPool2dResult with_nan =
      max_pool2d_with_indices(tensor({1, nan, 3, 2}, {1, 1, 2, 2}), {.kernel_size = {2, 2}});
  CHECK(std::isnan(with_nan.values.item()));
  CHECK(int_values(with_nan.indices) == std::vector<int64_t>{1});
}

TEST_CASE("avg_pool2d: 2x2 windows of a 4x4 plane, by hand") {
  Tensor x = requiring_grad(tensor(kGrid4, {1, 1, 4, 4}));
  Tensor y = avg_pool2d(x, {.kernel_size = {2, 2}});
  CHECK_CLOSE(y, tensor({1.75, 4.25, 6.25, 2.25}, {1, 1, 2, 2}), 1e-6, 0);
  y.backward(tensor({4, 8, 12, 16}, {1, 1, 2, 2}));
  CHECK_CLOSE(x.grad(), tensor({1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, {1, 1, 4, 4}),
              1e-6, 0);
}

TEST_CASE("avg_pool2d: padding with and without count_include_pad, by hand") {
  // Windows (rows x cols) {0} x {0}, {0} x {1, 2}, {1, 2} x {0}, {1, 2} x {1, 2}.
  Tensor x = tensor(kGrid3, {1, 1, 3, 3});
  Pool2dOptions options = {.kernel_size = {2, 2}, .padding = {1, 1}};
  CHECK_CLOSE(avg_pool2d(x, options), tensor({0.25, 1.25, 2.75, 7}, {1, 1, 2, 2}), 1e-6, 0);
  options.count_include_pad = false;
  CHECK_CLOSE(avg_pool2d(x, options), tensor({1, 2.5, 5.5, 7}, {1, 1, 2, 2}), 1e-6, 0);
}

TEST_CASE("pooling: ceil_mode windows hang past the input, by hand") {
  // 3x3, kernel 2, stride 2: floor mode gives 1x1; ceil mode 2x2, the last row and
  // column of windows clipped. The divisor counts the window clipped to the padded
  // extent (here the input itself), so 2 and 1, not 4, even with count_include_pad.
  Tensor x = tensor(kGrid3, {1, 1, 3, 3});
  Pool2dOptions options = {.kernel_size = {2, 2}, .ceil_mode = true};
  CHECK_CLOSE(avg_pool2d(x, options), tensor({3, 4.5, 7.5, 9}, {1, 1, 2, 2}), 1e-6, 0);
  CHECK_CLOSE(max_pool2d(x, options), tensor({5, 6, 8, 9}, {1, 1, 2, 2}), 0, 0);
  options.ceil_mode = false;
  CHECK_CLOSE(avg_pool2d(x, options), tensor({3}, {1, 1, 1, 1}), 1e-6, 0);
}

TEST_CASE("pooling: ceil_mode drops a last window that would start in the right padding") {
  // H = 5, kernel 2, stride 2, pad 1: ceil((5 + 2 - 2) / 2) + 1 = 4 windows, but the
  // 4th starts at 5, past the input, so PyTorch keeps 3 (as floor mode does).
  Tensor x = ones({1, 1, 5, 5});
  Pool2dOptions options = {.kernel_size = {2, 2}, .padding = {1, 1}, .ceil_mode = true};
  CHECK(max_pool2d(x, options).sizes() == Shape{1, 1, 3, 3});
  // H = 6, kernel 3, stride 2: ceil mode adds a clipped third window.
  options = {.kernel_size = {3, 3}, .stride = {{2, 2}}, .ceil_mode = true};
  CHECK(avg_pool2d(ones({1, 1, 6, 6}), options).sizes() == Shape{1, 1, 3, 3});
  options.ceil_mode = false;
  CHECK(avg_pool2d(ones({1, 1, 6, 6}), options).sizes() == Shape{1, 1, 2, 2});
}

TEST_CASE("global pools: whole planes, by hand") {
  Tensor x = tensor({1, 2, 3, 4, -5, -6, -7, -8}, {1, 2, 2, 2});
  CHECK_CLOSE(global_avg_pool2d(x), tensor({2.5, -6.5}, {1, 2, 1, 1}), 1e-6, 0);
  CHECK_CLOSE(global_max_pool2d(x), tensor({4, -5}, {1, 2, 1, 1}), 0, 0);
}

// ---------------------------------------------------------------------------
// Against the naive reference.

TEST_CASE("max_pool2d and avg_pool2d match a naive window loop over a config grid") {
  Generator gen(7);
  for (DType dtype : {DType::Float32, kF64}) {
    for (const auto& [layout, x] : layouts({2, 3, 7, 6}, dtype, gen)) {
      for (const Pool2dOptions& options : option_grid()) {
        CAPTURE(layout);
        INFO(options_str(options), " dtype ", dtype_name(dtype));
        NaivePool expected_max = naive_pool(x, options, true);
        MaxPool2dResult got = max_pool2d_with_indices(x, options);
        CHECK_CLOSE(got.values, expected_max.values, 0, 0);
        CHECK(int_values(got.indices) == expected_max.argmax);
        CHECK_CLOSE(avg_pool2d(x, options), naive_pool(x, options, false).values, 1e-5, 1e-6);
      }
    }
  }
}

TEST_CASE("pooling: the output keeps the input's layout") {
  Generator gen(11);
  Tensor nhwc = randn({2, 3, 6, 5}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
  const Pool2dOptions options = {.kernel_size = {2, 2}, .stride = {{1, 1}}};
  MaxPool2dResult r = max_pool2d_with_indices(nhwc, options);
  CHECK(r.values.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(r.indices.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(avg_pool2d(nhwc, options).is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(avg_pool2d(nhwc, options).is_contiguous());
  Tensor nchw = nhwc.contiguous();
  CHECK(max_pool2d(nchw, options).is_contiguous());
  CHECK(avg_pool2d(nchw, options).is_contiguous());
}

TEST_CASE("pooling: output_format sets the output's layout, with the same values and gradients") {
  Generator gen(12);
  const Tensor x_nhwc = randn({2, 8, 6, 5}, {.dtype = kF64}, &gen).contiguous(MemoryFormat::ChannelsLast);
  for (MemoryFormat in_format : {MemoryFormat::ChannelsLast, MemoryFormat::Contiguous}) {
    for (MemoryFormat out_format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      CAPTURE(memory_format_name(in_format));
      CAPTURE(memory_format_name(out_format));
      const Pool2dOptions plain = {.kernel_size = {2, 2}, .stride = {{2, 1}}, .padding = {1, 0}};
      Pool2dOptions formatted = plain;
      formatted.output_format = out_format;
      const Tensor x = x_nhwc.contiguous(in_format).detach();
      CHECK(max_pool2d(x, formatted).is_contiguous(out_format));
      CHECK(avg_pool2d(x, formatted).is_contiguous(out_format));
      CHECK(max_pool2d_with_indices(x, formatted).values.is_contiguous(out_format));
      CHECK_CLOSE(max_pool2d(x, formatted), max_pool2d(x, plain), 0, 0);
      CHECK_CLOSE(avg_pool2d(x, formatted), avg_pool2d(x, plain), 0, 0);
      GradcheckResult r =
          gradcheck([&](const std::vector<Tensor>& in) { return max_pool2d(in[0], formatted); },
                    {requiring_grad(x)});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
  CHECK_THROWS_WITH_FRAGMENT(
      max_pool2d(x_nhwc, {.kernel_size = {2, 2}, .output_format = MemoryFormat::Preserve}), ValueError,
      "output_format must be contiguous or channels_last, got preserve");
}

TEST_CASE("global pools match a naive per-plane mean and max") {
  Generator gen(5);
  for (const auto& [layout, x] : layouts({2, 3, 5, 4}, kF64, gen)) {
    CAPTURE(layout);
    const std::vector<double> in = x.to_vector<double>();
    std::vector<double> mean(6, 0.0), max(6, -std::numeric_limits<double>::infinity());
    for (size_t i = 0; i < in.size(); ++i) {
      mean[i / 20] += in[i] / 20;
      max[i / 20] = std::max(max[i / 20], in[i]);
    }
    CHECK_CLOSE(global_avg_pool2d(x), tensor(mean, {2, 3, 1, 1}, {.dtype = kF64}), 1e-12, 1e-12);
    CHECK_CLOSE(global_max_pool2d(x), tensor(max, {2, 3, 1, 1}, {.dtype = kF64}), 0, 0);
  }
}

// ---------------------------------------------------------------------------
// Gradients.

TEST_CASE("max_pool2d gradcheck, without and with ties") {
  Generator gen(3);
  const std::vector<Pool2dOptions> configs = {
      {.kernel_size = {2, 2}},
      {.kernel_size = {3, 3}, .stride = {{2, 2}}, .padding = {1, 1}, .ceil_mode = true},
      {.kernel_size = {3, 2}, .stride = {{1, 2}}, .padding = {1, 0}},
  };
  for (const Pool2dOptions& options : configs) {
    INFO(options_str(options));
    for (const auto& [layout, x] : layouts({2, 2, 5, 6}, kF64, gen)) {
      CAPTURE(layout);
      GradcheckResult r =
          gradcheck([&](const std::vector<Tensor>& in) { return max_pool2d(in[0], options); },
                    {requiring_grad(x)});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
  // Overlapping windows over a plane full of ties: any subgradient passes at a kink.
  Tensor ties = requiring_grad(
      tensor({1, 1, 2, 2, 1, 1, 2, 2, 0, 3, 3, 0, 0, 3, 3, 0}, {1, 1, 4, 4}, {.dtype = kF64}));
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) {
        return max_pool2d(in[0], {.kernel_size = {2, 2}, .stride = {{1, 1}}});
      },
      {ties});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.kinks > 0);
}

TEST_CASE("avg_pool2d gradcheck") {
  Generator gen(4);
  const std::vector<Pool2dOptions> configs = {
      {.kernel_size = {2, 2}},
      {.kernel_size = {3, 3}, .stride = {{2, 2}}, .padding = {1, 1}, .ceil_mode = true},
      {.kernel_size = {3, 3},
       .stride = {{2, 1}},
       .padding = {1, 1},
       .ceil_mode = true,
       .count_include_pad = false},
  };
  for (const Pool2dOptions& options : configs) {
    INFO(options_str(options));
    for (const auto& [layout, x] : layouts({2, 2, 5, 6}, kF64, gen)) {
      CAPTURE(layout);
      GradcheckResult r =
          gradcheck([&](const std::vector<Tensor>& in) { return avg_pool2d(in[0], options); },
                    {requiring_grad(x)});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
}

TEST_CASE("global pools gradcheck") {
  Generator gen(6);
  for (const auto& [layout, x] : layouts({2, 3, 3, 4}, kF64, gen)) {
    CAPTURE(layout);
    GradcheckResult avg =
        gradcheck([](const std::vector<Tensor>& in) { return global_avg_pool2d(in[0]); },
                  {requiring_grad(x)});
    CHECK_MESSAGE(avg.ok, avg.message);
    GradcheckResult max =
        gradcheck([](const std::vector<Tensor>& in) { return global_max_pool2d(in[0]); },
                  {requiring_grad(x)});
    CHECK_MESSAGE(max.ok, max.message);
  }
}

// ---------------------------------------------------------------------------
// Bad arguments.

TEST_CASE("pooling rejects bad arguments like PyTorch, printing the values") {
  Tensor x = zeros({1, 2, 5, 5});
  CHECK_THROWS_WITH_FRAGMENT(max_pool2d(zeros({2, 5, 5}), {.kernel_size = {2, 2}}), ShapeError,
                             "[max_pool2d] expects a 4-D input (N, C, H, W) but got "
                             "shape (2, 5, 5)");
  CHECK_THROWS_WITH_FRAGMENT(avg_pool2d(x, {.kernel_size = {3, 3}, .padding = {2, 1}}), ValueError,
                             "[avg_pool2d] pad should be at most half of effective kernel size, "
                             "but got padding (2, 1) for kernel_size (3, 3)");
  CHECK_THROWS_WITH_FRAGMENT(max_pool2d(x, {.kernel_size = {2, 2}, .padding = {0, 2}}), ValueError,
                             "padding (0, 2) for kernel_size (2, 2)");
  CHECK_THROWS_WITH_FRAGMENT(max_pool2d(x, {.kernel_size = {0, 2}}), ValueError,
                             "[max_pool2d] kernel_size must be positive but got (0, 2)");
  CHECK_THROWS_WITH_FRAGMENT(avg_pool2d(x, {.kernel_size = {2, 2}, .stride = {{1, 0}}}), ValueError,
                             "[avg_pool2d] stride must be positive but got (1, 0)");
  CHECK_THROWS_WITH_FRAGMENT(avg_pool2d(x, {.kernel_size = {2, 2}, .padding = {-1, 0}}), ValueError,
                             "padding must be non-negative but got (-1, 0)");
  CHECK_THROWS_WITH_FRAGMENT(max_pool2d(zeros({1, 1, 2, 6}), {.kernel_size = {3, 3}}), ShapeError,
                             "[max_pool2d] output size (0, 2) is too small");
  CHECK_THROWS_WITH_FRAGMENT(avg_pool2d(zeros({1, 1, 0, 4}), {.kernel_size = {1, 1}}), ShapeError,
                             "input shape (1, 1, 0, 4)");
  CHECK_THROWS_WITH_FRAGMENT(global_avg_pool2d(zeros({3, 4})), ShapeError,
                             "[global_avg_pool2d] expects a 4-D input");
  CHECK_THROWS_WITH_FRAGMENT(global_max_pool2d(zeros({3, 4, 5})), ShapeError,
                             "[global_max_pool2d] expects a 4-D input (N, C, H, W) but got "
                             "shape (3, 4, 5)");
  CHECK_THROWS_WITH_FRAGMENT(
      max_pool2d(zeros({1, 1, 4, 4}, {.dtype = DType::Int64}), {.kernel_size = {2, 2}}), TypeError,
      "[max_pool2d]");
}

}  // namespace
}  // namespace loom
