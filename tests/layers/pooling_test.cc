// File: tests/layers/pooling_test.cc
// Pooling modules equal their ops (stride defaulting to the kernel, pairs,
// ceil_mode, count_include_pad), adaptive average pooling to any size, adaptive
// max pooling only to 1x1, errors and printing.
// N batch, C channels, H, W.
#include "layers/pooling.h"

#include <doctest/doctest.h>

#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

Tensor input(uint64_t seed) {
  Generator gen(seed);
  return randn({2, 3, 7, 6}, {}, &gen);
}

TEST_CASE("MaxPool2d equals max_pool2d; stride defaults to the kernel") {
  const Tensor x = input(1);
  CHECK_CLOSE(nn::MaxPool2d(2)(x), max_pool2d(x, {.kernel_size = {2, 2}, .stride = {{2, 2}}}), 0,
              0);
  CHECK(shape_str(nn::MaxPool2d(2)(x).sizes()) == "(2, 3, 3, 3)");
  CHECK_CLOSE(
      nn::MaxPool2d(3, {.stride = 2, .padding = 1, .ceil_mode = true})(x),
      max_pool2d(x,
                 {.kernel_size = {3, 3}, .stride = {{2, 2}}, .padding = {1, 1}, .ceil_mode = true}),
      0, 0);
  CHECK_CLOSE(nn::MaxPool2d({3, 2}, {.stride = {{2, 1}}})(x),
              max_pool2d(x, {.kernel_size = {3, 2}, .stride = {{2, 1}}}), 0, 0);
  CHECK_CLOSE(nn::MaxPool2d(2)(x.contiguous(MemoryFormat::ChannelsLast)), nn::MaxPool2d(2)(x), 0,
              0);
  const Tensor hand = tensor({1, 5, 2, 0, 3, 4, 7, 6, 8, 1, 2, 3, 0, 9, 4, 4}, {1, 1, 4, 4});
  CHECK(nn::MaxPool2d(2)(hand).to_vector<double>() == std::vector<double>{5, 7, 9, 4});
}

TEST_CASE("AvgPool2d equals avg_pool2d, count_include_pad both ways") {
  const Tensor x = input(2);
  for (bool include : {true, false}) {
    CAPTURE(include);
    CHECK_CLOSE(nn::AvgPool2d(3, {.stride = 2, .padding = 1, .count_include_pad = include})(x),
                avg_pool2d(x, {.kernel_size = {3, 3},
                               .stride = {{2, 2}},
                               .padding = {1, 1},
                               .count_include_pad = include}),
                0, 0);
  }
  CHECK_CLOSE(nn::AvgPool2d(2, {.ceil_mode = true})(x),
              avg_pool2d(x, {.kernel_size = {2, 2}, .ceil_mode = true}), 0, 0);
  const Tensor hand = tensor({1, 2, 3, 6}, {1, 1, 2, 2});
  CHECK(nn::AvgPool2d(2)(hand).item() == 3.0);
}

TEST_CASE("AdaptiveAvgPool2d(1) and AdaptiveMaxPool2d(1) pool each whole plane") {
  const Tensor x = input(3);
  CHECK_CLOSE(nn::AdaptiveAvgPool2d(1)(x), global_avg_pool2d(x), 0, 0);
  CHECK_CLOSE(nn::AdaptiveMaxPool2d({1, 1})(x), global_max_pool2d(x), 0, 0);
  CHECK_CLOSE(nn::AdaptiveAvgPool2d(1)(x), mean(x, {2, 3}, true), 1e-6, 1e-6);
  CHECK(shape_str(nn::AdaptiveMaxPool2d(1)(x).sizes()) == "(2, 3, 1, 1)");
}

TEST_CASE("AdaptiveAvgPool2d to any size is adaptive_avg_pool2d, printed as PyTorch does") {
  Generator gen(12);
  const Tensor x = randn({2, 3, 7, 6}, {}, &gen);
  CHECK_CLOSE(nn::AdaptiveAvgPool2d({3, 2})(x), adaptive_avg_pool2d(x, {3, 2}), 0, 0);
  CHECK(nn::AdaptiveAvgPool2d({3, 2}).repr() == "AdaptiveAvgPool2d(output_size=(3, 2))");
  CHECK_THROWS_WITH_FRAGMENT(nn::AdaptiveAvgPool2d(0), ValueError,
                             "[AdaptiveAvgPool2d] output_size must be positive, got (0, 0)");
}

TEST_CASE("AdaptiveMaxPool2d to any size is adaptive_max_pool2d, printed as PyTorch does") {
  Generator gen(13);
  const Tensor x = randn({2, 3, 7, 6}, {}, &gen);
  CHECK_CLOSE(nn::AdaptiveMaxPool2d({3, 4})(x), adaptive_max_pool2d(x, {3, 4}), 0, 0);
  CHECK(shape_str(nn::AdaptiveMaxPool2d({3, 4})(x).sizes()) == "(2, 3, 3, 4)");
  CHECK(nn::AdaptiveMaxPool2d({3, 4}).repr() == "AdaptiveMaxPool2d(output_size=(3, 4))");
  CHECK_THROWS_WITH_FRAGMENT(nn::AdaptiveMaxPool2d({1, 0}), ValueError,
                             "[AdaptiveMaxPool2d] output_size must be positive, got (1, 0)");
}

TEST_CASE("pooling layers reject bad windows") {
  CHECK_THROWS_WITH_FRAGMENT(nn::MaxPool2d(0), ValueError,
                             "[MaxPool2d] kernel_size must be positive, got (0, 0)");
  CHECK_THROWS_WITH_FRAGMENT(nn::AvgPool2d(2, {.stride = 0}), ValueError,
                             "[AvgPool2d] stride must be positive, got (0, 0)");
  CHECK_THROWS_WITH_FRAGMENT(nn::MaxPool2d(2, {.padding = 2}), ValueError,
                             "padding (2, 2) must be non-negative and at most half of "
                             "kernel_size (2, 2)");
  CHECK_THROWS_WITH_FRAGMENT(nn::MaxPool2d(2)(zeros({3, 4, 4})), ShapeError,
                             "[max_pool2d] expects a 4-D input");
}

TEST_CASE("pooling layers print as PyTorch's") {
  CHECK(nn::MaxPool2d(2).repr() ==
        "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  CHECK(nn::MaxPool2d(3, {.stride = 2, .padding = 1, .ceil_mode = true}).repr() ==
        "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)");
  CHECK(nn::AvgPool2d({3, 2}, {.stride = {{2, 1}}}).repr() ==
        "AvgPool2d(kernel_size=(3, 2), stride=(2, 1), padding=0)");
  CHECK(nn::AdaptiveAvgPool2d(1).repr() == "AdaptiveAvgPool2d(output_size=1)");
  CHECK(nn::AdaptiveMaxPool2d(1).repr() == "AdaptiveMaxPool2d(output_size=1)");
}

TEST_CASE("the 1-D pooling layers equal their ops; stride defaults to the kernel") {
  Generator gen(9);
  const Tensor x = randn({2, 3, 11}, {}, &gen);
  CHECK_CLOSE(nn::MaxPool1d(3)(x), max_pool1d(x, {.kernel_size = 3, .stride = 3}), 0, 0);
  CHECK_CLOSE(nn::MaxPool1d(3, {.stride = 2, .padding = 1, .ceil_mode = true})(x),
              max_pool1d(x, {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true}), 0, 0);
  CHECK_CLOSE(nn::AvgPool1d(4, {.stride = 1, .padding = 2, .count_include_pad = false})(x),
              avg_pool1d(x, {.kernel_size = 4, .stride = 1, .padding = 2, .count_include_pad = false}), 0, 0);
  CHECK(nn::MaxPool1d(2)(x).sizes() == Shape{2, 3, 5});
  CHECK_CLOSE(nn::AdaptiveAvgPool1d(4)(x), adaptive_avg_pool1d(x, 4), 0, 0);
  CHECK_CLOSE(nn::AdaptiveMaxPool1d(1)(x), max(x, 2, /*keepdim=*/true).values, 0, 0);
  CHECK_THROWS_WITH_FRAGMENT(nn::MaxPool1d(0), ValueError,
                             "[MaxPool1d] kernel_size and stride must be positive, got 0 and 0");
  CHECK_THROWS_WITH_FRAGMENT(nn::AvgPool1d(2, {.padding = 2}), ValueError,
                             "[AvgPool1d] padding 2 must be non-negative and at most half of kernel_size 2");
  CHECK_THROWS_WITH_FRAGMENT(nn::AdaptiveMaxPool1d(0), ValueError, "[AdaptiveMaxPool1d] output_size must be positive");
  CHECK(nn::MaxPool1d(3, {.stride = 2}).repr() ==
        "MaxPool1d(kernel_size=3, stride=2, padding=0, dilation=1, ceil_mode=False)");
  CHECK(nn::AvgPool1d(3, {.stride = 2, .padding = 1}).repr() ==
        "AvgPool1d(kernel_size=(3,), stride=(2,), padding=(1,))");
  CHECK(nn::AdaptiveAvgPool1d(5).repr() == "AdaptiveAvgPool1d(output_size=5)");
  CHECK(nn::AdaptiveMaxPool1d(5).repr() == "AdaptiveMaxPool1d(output_size=5)");
}

}  // namespace
}  // namespace loom
