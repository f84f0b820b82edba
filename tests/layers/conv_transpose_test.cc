// File: tests/layers/conv_transpose_test.cc
// ConvTranspose2d: PyTorch's weight layout and state_dict names, output size,
// forward equal to the functional op, repr and construction errors.
#include "layers/conv_transpose.h"

#include <doctest/doctest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/layers/module_testing.h"
#include "tests/testing.h"

namespace loom {

TEST_CASE("ConvTranspose2d has PyTorch's weight (C, K/groups, R, S) and names") {
  Generator gen(31);
  nn::ConvTranspose2d up(6, 4, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2,
                                   .generator = &gen});
  CHECK(up.weight().sizes() == Shape{6, 2, 3, 3});
  CHECK(up.bias().sizes() == Shape{4});
  CHECK(testing::state_dict_names(up) == std::vector<std::string>{"weight", "bias"});
  Tensor x = randn({2, 6, 5, 5}, {}, &gen);
  Tensor y = up(x);
  CHECK(y.sizes() == Shape{2, 4, 10, 10});
  CHECK_CLOSE(y,
              conv_transpose2d(x, up.weight(), up.bias(),
                               {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1},
                                .groups = 2}),
              0, 0);
  CHECK(up.repr() ==
        "ConvTranspose2d(6, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), "
        "output_padding=(1, 1), groups=2)");
  // PyTorch's bound 1/sqrt(fan_in), fan_in = K/groups * R * S = 18
  for (double v : testing::values(up.bias())) CHECK(std::abs(v) <= 1.0 / std::sqrt(18.0));
}

// The layer's settings (bias, generator) exist only in the layer's options type.
template <typename Options>
concept HasLayerSettings = requires(Options o) {
  o.bias;
  o.generator;
};
static_assert(HasLayerSettings<nn::ConvTranspose2dOptions>);
static_assert(!HasLayerSettings<loom::ConvTranspose2dOptions>);

TEST_CASE("ConvTranspose2d keeps its own settings; its forward calls conv_transpose2d") {
  Generator gen(32), same(32);
  nn::ConvTranspose2d up(4, 2, 2, {.stride = 2, .bias = false, .generator = &gen});
  nn::ConvTranspose2d twin(4, 2, 2, {.stride = 2, .bias = false, .generator = &same});
  CHECK_CLOSE(up.weight(), twin.weight(), 0, 0);
  CHECK(up.options().stride == Size2(2));
  CHECK_FALSE(up.bias().defined());
  const Tensor x = randn({1, 4, 3, 3}, {}, &gen);
  CHECK_CLOSE(up(x), conv_transpose2d(x, up.weight(), Tensor(), up.options()), 0, 0);
  CHECK(up.repr() == "ConvTranspose2d(4, 2, kernel_size=(2, 2), stride=(2, 2), bias=False)");
}

TEST_CASE("ConvTranspose2d refuses channels that groups does not divide") {
  CHECK_THROWS_WITH_FRAGMENT(nn::ConvTranspose2d(3, 4, 3, {.groups = 2}), ValueError,
                             "[ConvTranspose2d] in_channels (3) and out_channels (4)");
}

}  // namespace loom
