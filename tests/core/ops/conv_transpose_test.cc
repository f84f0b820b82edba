// File: tests/core/ops/conv_transpose_test.cc
// conv_transpose2d against a direct scatter loop (stride, padding,
// output_padding, dilation, groups; NCHW and channels-last), its relation to
// conv2d's input gradient, float64 gradcheck, and argument errors.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include "core/ops/conv_transpose.h"

#include <doctest/doctest.h>

#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

// Each input element scatters x * w into the output window it maps to:
// y[n, k, h s - pad + r dil, w s - pad + q dil] += x[n, c, h, w] w[c, k', r, q].
Tensor naive_conv_transpose(const Tensor& x, const Tensor& w, const Tensor& bias,
                            const ConvTranspose2dOptions& o) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Kg = w.size(1), R = w.size(2), S = w.size(3), Cg = C / o.groups;
  const int64_t P =
      (H - 1) * o.stride.h - 2 * o.padding.h + o.dilation.h * (R - 1) + o.output_padding.h + 1;
  const int64_t Q =
      (W - 1) * o.stride.w - 2 * o.padding.w + o.dilation.w * (S - 1) + o.output_padding.w + 1;
  const int64_t K = Kg * o.groups;
  std::vector<double> y(N * K * P * Q, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t ww = 0; ww < W; ++ww)
          for (int64_t k = 0; k < Kg; ++k)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t q = 0; q < S; ++q) {
                const int64_t p = h * o.stride.h - o.padding.h + r * o.dilation.h;
                const int64_t qq = ww * o.stride.w - o.padding.w + q * o.dilation.w;
                if (p < 0 || p >= P || qq < 0 || qq >= Q) continue;
                const int64_t out_k = (c / Cg) * Kg + k;
                y[((n * K + out_k) * P + p) * Q + qq] += x.at({n, c, h, ww}) * w.at({c, k, r, q});
              }
  Tensor out = tensor(y, {N, K, P, Q}, kF64);
  return bias.defined() ? out + bias.detach().to(DType::Float64).view({1, -1, 1, 1}) : out;
}

struct Case {
  Shape x, w;
  ConvTranspose2dOptions options;
};

const std::vector<Case> kCases = {
    {{2, 3, 4, 5}, {3, 2, 3, 3}, {}},
    {{1, 4, 3, 3}, {4, 5, 2, 2}, {.stride = 2}},
    {{2, 2, 5, 4}, {2, 3, 3, 2}, {.stride = {2, 3}, .padding = {1, 0}, .output_padding = {1, 2}}},
    {{1, 4, 4, 4}, {4, 1, 3, 3}, {.padding = {1, 1}, .dilation = {2, 1}, .groups = 2}},
    {{2, 6, 3, 5}, {6, 2, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 3}},
};

}  // namespace

TEST_CASE("conv_transpose2d matches the direct scatter loop, NCHW and channels-last") {
  Generator gen(11);
  for (size_t i = 0; i < kCases.size(); ++i) {
    const Case& c = kCases[i];
    CAPTURE(i);
    Tensor x = randn(c.x, {}, &gen), w = randn(c.w, {}, &gen);
    Tensor b = randn({c.w[1] * c.options.groups}, {}, &gen);
    Tensor expected = naive_conv_transpose(x, w, b, c.options);
    CHECK_CLOSE(conv_transpose2d(x, w, b, c.options), expected, 1e-5, 1e-5);
    Tensor x_cl = x.contiguous(MemoryFormat::ChannelsLast);
    CHECK_CLOSE(conv_transpose2d(x_cl, w, b, c.options), expected, 1e-5, 1e-5);
  }
}

TEST_CASE("conv_transpose2d is conv2d's input gradient") {
  Generator gen(12);
  Tensor w = randn({4, 3, 3, 3}, kF64, &gen);  // conv2d: 3 -> 4 channels; transposed: 4 -> 3
  Tensor x = randn({2, 3, 7, 7}, kF64, &gen).requires_grad_(true);
  Tensor dy = randn({2, 4, 4, 4}, kF64, &gen);
  conv2d(x, w, Tensor(), {.stride = {2, 2}, .padding = {1, 1}}).backward(dy);
  Tensor t = conv_transpose2d(dy, w, Tensor(), {.stride = {2, 2}, .padding = {1, 1}});
  CHECK_CLOSE(t, x.grad(), 1e-12, 1e-12);
}

TEST_CASE("conv_transpose2d passes the float64 gradcheck") {
  Generator gen(13);
  for (size_t i = 0; i < kCases.size(); ++i) {
    const Case& c = kCases[i];
    CAPTURE(i);
    Tensor x = randn(c.x, kF64, &gen).requires_grad_(true);
    Tensor w = randn(c.w, kF64, &gen).requires_grad_(true);
    Tensor b = randn({c.w[1] * c.options.groups}, kF64, &gen).requires_grad_(true);
    GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return conv_transpose2d(in[0], in[1], in[2], c.options);
        },
        {x, w, b});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("conv_transpose2d errors name the op and the values") {
  Tensor x = zeros({1, 3, 4, 4});
  CHECK_THROWS_WITH_FRAGMENT(conv_transpose2d(x, zeros({2, 3, 3, 3})), ShapeError,
                             "[conv_transpose2d] input has 3 channels but weight");
  CHECK_THROWS_WITH_FRAGMENT(
      conv_transpose2d(x, zeros({3, 2, 3, 3}), Tensor(), {.output_padding = {1, 1}}), ValueError,
      "output_padding (1, 1) must be smaller than the stride");
  CHECK_THROWS_WITH_FRAGMENT(conv_transpose2d(x, zeros({3, 2, 3, 3}), zeros({3})), ShapeError,
                             "bias must have shape (2,)");
  CHECK_THROWS_WITH_FRAGMENT(conv_transpose2d(zeros({3, 4, 4}), zeros({3, 2, 3, 3})), ShapeError,
                             "expected a 4-D input");
}

}  // namespace loom
