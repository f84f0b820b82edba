// File: tests/layers/conv_test.cc
// Conv2d: forward equals loom::conv2d with the layer's own weights over a grid
// of options, padding="same" / "valid" on random filters against padding by
// hand, padding_mode by hand and by gradcheck, parameter shapes, gradients,
// construction errors and printing.
// N batch, C in channels, H, W, K out channels, R, S filter.
#include "layers/conv.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "layers/init.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct Config {
  int64_t in, out;
  nn::Size2 kernel;
  nn::Conv2dOptions options;
  Conv2dOptions functional;  // the same geometry, spelled as pairs, without the layer's settings
};

TEST_CASE("Conv2d forward is conv2d with the layer's weight and bias") {
  const std::vector<Config> configs = {
      {3, 4, 3, {}, {}},
      {3, 4, 3, {.stride = 2, .padding = 1}, {.stride = {2, 2}, .padding = {1, 1}}},
      {4, 6, {3, 1}, {.stride = {2, 1}, .padding = {1, 0}}, {.stride = {2, 1}, .padding = {1, 0}}},
      {2, 2, 3, {.padding = 2, .dilation = 2}, {.padding = {2, 2}, .dilation = {2, 2}}},
      {4, 6, 3, {.groups = 2, .bias = false}, {.groups = 2}},
  };
  Generator gen(1);
  for (const Config& c : configs) {
    nn::Conv2d conv(c.in, c.out, c.kernel, c.options);
    CAPTURE(conv.repr());
    const Tensor x = randn({2, c.in, 7, 6}, {}, &gen);
    CHECK_CLOSE(conv(x), conv2d(x, conv.weight(), conv.bias(), c.functional), 0, 0);
    const Tensor x_nhwc = x.contiguous(MemoryFormat::ChannelsLast);
    CHECK_CLOSE(conv(x_nhwc), conv2d(x, conv.weight(), conv.bias(), c.functional), 1e-5, 1e-6);
  }
}

// The layer's settings (bias, generator) exist only in the layer's options type.
template <typename Options>
concept HasLayerSettings = requires(Options o) {
  o.bias;
  o.generator;
};
static_assert(HasLayerSettings<nn::Conv2dOptions>);
static_assert(!HasLayerSettings<loom::Conv2dOptions>);

TEST_CASE("Conv2d keeps its own settings; its forward calls conv2d with the geometry") {
  Generator gen(4), same(4);
  const nn::Conv2dOptions options{.stride = {2, 1}, .padding = 1, .bias = false, .generator = &gen};
  nn::Conv2d conv(3, 4, 3, options);
  CHECK_FALSE(conv.bias().defined());
  CHECK(conv.options().stride == Size2(2, 1));
  CHECK(conv.options().padding == Size2(1));
  // The generator seeds the weights once: a second layer from the same seed has them too.
  nn::Conv2d twin(3, 4, 3, {.stride = {2, 1}, .padding = 1, .bias = false, .generator = &same});
  CHECK_CLOSE(conv.weight(), twin.weight(), 0, 0);
  const Tensor x = randn({2, 3, 6, 5}, {}, &gen);
  CHECK_CLOSE(conv(x), conv2d(x, conv.weight(), Tensor(), conv.options()), 0, 0);
}

TEST_CASE("Conv2d parameters: weight (K, C/groups, R, S), optional bias (K)") {
  nn::Conv2d conv(6, 9, {3, 5}, {.groups = 3});
  CHECK(shape_str(conv.weight().sizes()) == "(9, 2, 3, 5)");
  CHECK(shape_str(conv.bias().sizes()) == "(9,)");
  CHECK(conv.num_parameters() == 9 * 2 * 15 + 9);
  CHECK(conv.in_channels() == 6);
  CHECK(conv.out_channels() == 9);
  CHECK(conv.kernel_size() == nn::Size2(3, 5));
  nn::Conv2d no_bias(6, 9, 3, {.bias = false});
  CHECK_FALSE(no_bias.bias().defined());
  CHECK(no_bias.named_parameters().size() == 1);
}

TEST_CASE("Conv2d gradients reach weight and bias") {
  Generator gen(2);
  nn::Conv2d conv(2, 3, 3, {.padding = 1});
  const Tensor x = randn({1, 2, 4, 4}, {}, &gen);
  sum(conv(x)).backward();
  REQUIRE(conv.weight().grad().defined());
  // d sum / d bias_k = the number of output positions.
  CHECK(conv.bias().grad().to_vector<double>() == std::vector<double>(3, 16.0));
  const Tensor w = conv.weight().detach().requires_grad_(true);
  sum(conv2d(x, w, conv.bias().detach(), {.padding = {1, 1}})).backward();
  CHECK_CLOSE(conv.weight().grad(), w.grad(), 1e-6, 1e-6);
}

TEST_CASE("Conv2d rejects bad arguments when built and bad inputs when called") {
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv2d(3, 4, 3, {.groups = 2}), ValueError,
                             "[Conv2d] groups (2) must be positive and divide in_channels (3)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv2d(0, 4, 3), ValueError,
                             "in_channels and out_channels must be positive, got 0 and 4");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv2d(1, 4, {3, 0}), ValueError,
                             "kernel_size must be positive, got (3, 0)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv2d(1, 4, 3, {.stride = {1, 0}}), ValueError,
                             "stride must be positive, got (1, 0)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv2d(1, 4, 3, {.padding = -1}), ValueError,
                             "padding must be non-negative, got (-1, -1)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv2d(1, 4, 3, {.dilation = 0}), ValueError,
                             "dilation must be positive, got (0, 0)");
  nn::Conv2d conv(3, 4, 3);
  CHECK_THROWS_WITH_FRAGMENT(conv(zeros({1, 2, 5, 5})), ShapeError, "[conv2d]");
}

// x inside a zero border of `before` / `after` pixels (H, W), built by copying
// into a slice: the padding by hand, for comparing with the layer's own.
Tensor zero_border(const Tensor& x, Size2 before, Size2 after) {
  Tensor out = zeros({x.size(0), x.size(1), x.size(2) + before.h + after.h, x.size(3) + before.w + after.w});
  out.narrow(2, before.h, x.size(2)).narrow(3, before.w, x.size(3)).copy_(x);
  return out;
}

TEST_CASE("Conv2d padding=same keeps H and W for any filter and dilation, the odd pixel at the end") {
  Generator gen(5);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t r = randint(1, 7, {}, {.dtype = DType::Int64}, &gen).item();
    const int64_t s = randint(1, 7, {}, {.dtype = DType::Int64}, &gen).item();
    const int64_t dh = randint(1, 4, {}, {.dtype = DType::Int64}, &gen).item();
    const int64_t h = randint(1, 9, {}, {.dtype = DType::Int64}, &gen).item();
    const int64_t w = randint(1, 9, {}, {.dtype = DType::Int64}, &gen).item();
    CAPTURE(r);
    CAPTURE(s);
    CAPTURE(dh);
    nn::Conv2d conv(3, 4, {r, s}, {.padding = nn::Padding::Same, .dilation = {dh, 1}, .generator = &gen});
    const Tensor x = randn({2, 3, h, w}, {}, &gen);
    const Tensor y = conv(x);
    CHECK(y.sizes() == Shape{2, 4, h, w});
    // PyTorch's split: dilation * (R - 1) in all, half (rounded down) before.
    const Size2 total(dh * (r - 1), s - 1), before(total.h / 2, total.w / 2);
    const Tensor by_hand = zero_border(x, before, Size2(total.h - before.h, total.w - before.w));
    CHECK_CLOSE(y, conv2d(by_hand, conv.weight(), conv.bias(), {.dilation = {dh, 1}}), 1e-5, 1e-6);
    CHECK_CLOSE(conv(x.contiguous(MemoryFormat::ChannelsLast)), y, 1e-5, 1e-6);
  }
  nn::Conv2d valid(3, 4, 3, {.padding = nn::Padding::Valid});
  const Tensor x = randn({1, 3, 5, 6}, {}, &gen);
  CHECK_CLOSE(valid(x), conv2d(x, valid.weight(), valid.bias()), 0, 0);
}

TEST_CASE("Conv2d padding_mode: reflect and replicate pad the input first, by hand and with gradients") {
  // One row [1, 2, 3], a (1, 3) filter of ones, one pixel each side of W.
  const Tensor row = tensor({1, 2, 3}, {1, 1, 1, 3});
  struct Case {
    PadMode mode;
    std::vector<double> sums;
  };
  for (const Case& c : {Case{PadMode::Constant, {3, 6, 5}}, Case{PadMode::Reflect, {5, 6, 7}},
                        Case{PadMode::Replicate, {4, 6, 8}}}) {
    nn::Conv2d conv(1, 1, {1, 3}, {.padding = {0, 1}, .bias = false, .padding_mode = c.mode});
    nn::init::ones_(conv.weight());
    CHECK(conv(row).to_vector<double>() == c.sums);
  }
  Generator gen(6);
  for (PadMode mode : {PadMode::Reflect, PadMode::Replicate}) {
    for (const nn::ConvPadding& padding : {nn::ConvPadding(2, 1), nn::ConvPadding(nn::Padding::Same)}) {
      nn::Conv2d conv(2, 3, {4, 3}, {.padding = padding, .padding_mode = mode, .generator = &gen});
      CHECK(conv.options().padding == Size2(0));  // all of it in the pad before
      const Tensor x = randn({2, 2, 6, 5}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
      const Tensor w = conv.weight().detach().to(DType::Float64).requires_grad_(true);
      const Tensor b = conv.bias().detach().to(DType::Float64);
      // (W left, W right, H top, H bottom): same's filter extent 3 along H puts its odd pixel at the bottom.
      const std::vector<int64_t> pads = padding.kind ? std::vector<int64_t>{1, 1, 1, 2}
                                                     : std::vector<int64_t>{1, 1, 2, 2};
      CHECK_CLOSE(conv(x.detach().to(DType::Float32)), conv2d(pad(x, pads, mode), w, b).to(DType::Float32), 1e-5,
                  1e-5);
      const GradcheckResult r = gradcheck(
          [&](const std::vector<Tensor>& in) {
            nn::Conv2d twin(2, 3, {4, 3}, {.padding = padding, .bias = false, .padding_mode = mode});
            return conv2d(twin.padded_input(in[0]), in[1], Tensor(), twin.options());
          },
          {x, w});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
}

TEST_CASE("Conv2d padding errors: same with a stride, a negative amount, a reflection wider than the input") {
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv2d(1, 4, 3, {.stride = 2, .padding = nn::Padding::Same}), ValueError,
                             "[Conv2d] padding=same needs stride 1 (as in PyTorch), got stride (2, 2)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv2d(1, 4, 3, {.padding = {0, -2}}), ValueError,
                             "padding must be non-negative, got (0, -2)");
  nn::Conv2d mirrored(1, 1, 5, {.padding = 2, .padding_mode = PadMode::Reflect});
  CHECK_THROWS_WITH_FRAGMENT(mirrored(zeros({1, 1, 2, 2})), ShapeError,
                             "reflect padding must be smaller than the dim it pads");
}

TEST_CASE("Conv2d prints as PyTorch's, leaving defaults out") {
  CHECK(nn::Conv2d(1, 32, 3, {.padding = 1}).repr() ==
        "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
  CHECK(nn::Conv2d(1, 32, 3).repr() == "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))");
  CHECK(nn::Conv2d(4, 8, {3, 1}, {.stride = 2, .dilation = {2, 1}, .groups = 4, .bias = false})
            .repr() ==
        "Conv2d(4, 8, kernel_size=(3, 1), stride=(2, 2), dilation=(2, 1), groups=4, bias=False)");
  CHECK(nn::Conv2d(3, 8, 4, {.padding = nn::Padding::Same}).repr() ==
        "Conv2d(3, 8, kernel_size=(4, 4), stride=(1, 1), padding=same)");
  CHECK(nn::Conv2d(3, 8, 3, {.padding = nn::Padding::Valid}).repr() ==
        "Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=valid)");
  CHECK(nn::Conv2d(3, 8, 7, {.padding = 3, .bias = false, .padding_mode = PadMode::Reflect}).repr() ==
        "Conv2d(3, 8, kernel_size=(7, 7), stride=(1, 1), padding=(3, 3), bias=False, padding_mode=reflect)");
}

TEST_CASE("Conv1d: weight (K, C/groups, R) and bias (K) named as PyTorch's, a forward of conv1d") {
  Generator gen(7);
  nn::Conv1d conv(4, 6, 5, {.stride = 2, .padding = 2, .dilation = 1, .groups = 2, .generator = &gen});
  CHECK(conv.weight().sizes() == Shape{6, 2, 5});
  CHECK(conv.bias().sizes() == Shape{6});
  CHECK(conv.named_parameters().size() == 2);
  CHECK(conv.named_parameters()[0].first == "weight");
  // PyTorch's init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias, fan_in = C/groups * R = 10.
  CHECK(max(abs(conv.bias())).item() <= 1.0 / std::sqrt(10.0));
  const Tensor x = randn({3, 4, 17}, {.requires_grad = true}, &gen);
  const Tensor y = conv(x);
  CHECK(y.sizes() == Shape{3, 6, 9});
  CHECK_CLOSE(y, conv1d(x, conv.weight(), conv.bias(), {.stride = 2, .padding = 2, .groups = 2}), 0, 0);
  sum(y).backward();
  CHECK(conv.weight().grad().sizes() == conv.weight().sizes());
  CHECK(x.grad().sizes() == x.sizes());
  CHECK(conv(randn({4, 17}, {}, &gen)).sizes() == Shape{6, 9});  // one sample (C, L)
  CHECK_FALSE(nn::Conv1d(2, 2, 3, {.bias = false}).bias().defined());
}

TEST_CASE("Conv1d padding=same keeps L for any filter and dilation; reflect and replicate pad first") {
  Generator gen(8);
  for (int trial = 0; trial < 16; ++trial) {
    const int64_t r = randint(1, 8, {}, {.dtype = DType::Int64}, &gen).item();
    const int64_t dilation = randint(1, 4, {}, {.dtype = DType::Int64}, &gen).item();
    const int64_t l = randint(1, 12, {}, {.dtype = DType::Int64}, &gen).item();
    CAPTURE(r);
    CAPTURE(dilation);
    CAPTURE(l);
    nn::Conv1d conv(3, 2, r, {.padding = nn::Padding::Same, .dilation = dilation, .generator = &gen});
    const Tensor x = randn({2, 3, l}, {}, &gen);
    const int64_t total = dilation * (r - 1), before = total / 2;  // the odd one at the end, as PyTorch
    CHECK_CLOSE(conv(x), conv1d(pad(x, {before, total - before}), conv.weight(), conv.bias(), {.dilation = dilation}),
                1e-5, 1e-6);
  }
  const Tensor row = tensor({1, 2, 3}, {1, 1, 3});
  struct Case {
    PadMode mode;
    std::vector<double> sums;
  };
  for (const Case& c : {Case{PadMode::Constant, {3, 6, 5}}, Case{PadMode::Reflect, {5, 6, 7}},
                        Case{PadMode::Replicate, {4, 6, 8}}}) {
    nn::Conv1d conv(1, 1, 3, {.padding = 1, .bias = false, .padding_mode = c.mode});
    nn::init::ones_(conv.weight());
    CHECK(conv(row).to_vector<double>() == c.sums);
    CHECK(conv.options().padding == (c.mode == PadMode::Constant ? 1 : 0));
  }
}

TEST_CASE("Conv1d rejects bad arguments when built, in 1-D terms") {
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv1d(4, 6, 3, {.groups = 4}), ValueError,
                             "[Conv1d] groups (4) must be positive and divide in_channels (4) and out_channels (6)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv1d(4, 6, 0), ValueError,
                             "[Conv1d] kernel_size, stride and dilation must be positive, got 0, 1 and 1");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv1d(4, 6, 3, {.padding = -1}), ValueError,
                             "[Conv1d] padding is one non-negative number (or Padding::Same / Valid), got (-1, -1)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv1d(4, 6, 3, {.padding = {1, 2}}), ValueError, "got (1, 2)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv1d(4, 6, 3, {.stride = 2, .padding = nn::Padding::Same}), ValueError,
                             "[Conv1d] padding=same needs stride 1");
  CHECK_THROWS_WITH_FRAGMENT(nn::Conv1d(4, 6, 3)(zeros({2, 5, 8})), ShapeError, "[conv1d] input (2, 5, 8)");
}

TEST_CASE("Conv1d prints as PyTorch's, one-element tuples") {
  CHECK(nn::Conv1d(16, 33, 3, {.stride = 2}).repr() == "Conv1d(16, 33, kernel_size=(3,), stride=(2,))");
  CHECK(nn::Conv1d(1, 8, 5, {.padding = 2, .dilation = 2, .groups = 1, .bias = false}).repr() ==
        "Conv1d(1, 8, kernel_size=(5,), stride=(1,), padding=(2,), dilation=(2,), bias=False)");
  CHECK(nn::Conv1d(4, 4, 3, {.padding = nn::Padding::Same, .groups = 4, .padding_mode = PadMode::Replicate})
            .repr() == "Conv1d(4, 4, kernel_size=(3,), stride=(1,), padding=same, groups=4, padding_mode=replicate)");
}

}  // namespace
}  // namespace loom
