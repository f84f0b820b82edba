// File: tests/layers/conv_test.cc
// Conv2d: forward equals loom::conv2d with the layer's own weights over a grid
// of options, parameter shapes, gradients, construction errors and printing.
// N batch, C in channels, H, W, K out channels, R, S filter.
#include "layers/conv.h"

#include <doctest/doctest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
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

TEST_CASE("Conv2d prints as PyTorch's, leaving defaults out") {
  CHECK(nn::Conv2d(1, 32, 3, {.padding = 1}).repr() ==
        "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
  CHECK(nn::Conv2d(1, 32, 3).repr() == "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))");
  CHECK(nn::Conv2d(4, 8, {3, 1}, {.stride = 2, .dilation = {2, 1}, .groups = 4, .bias = false})
            .repr() ==
        "Conv2d(4, 8, kernel_size=(3, 1), stride=(2, 2), dilation=(2, 1), groups=4, bias=False)");
}

}  // namespace
}  // namespace loom
