// File: tests/layers/flatten_test.cc
// Flatten: shapes for any dim range, NCHW feature order for channels-last
// inputs, gradients, errors and printing. Unflatten: the inverse, in a model,
// its checks and printing.
// N batch, C channels, H, W.
#include "layers/flatten.h"

#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/container.h"
#include "tests/testing.h"

namespace loom {
namespace {

TEST_CASE("Flatten merges start_dim..end_dim") {
  const Tensor x = arange(120).reshape({2, 3, 4, 5});
  CHECK(shape_str(nn::Flatten()(x).sizes()) == "(2, 60)");
  CHECK(shape_str(nn::Flatten(0, 1)(x).sizes()) == "(6, 4, 5)");
  CHECK(shape_str(nn::Flatten(2)(x).sizes()) == "(2, 3, 20)");
  CHECK(nn::Flatten()(x).to_vector<double>() == x.to_vector<double>());
}

TEST_CASE("Flatten keeps NCHW feature order for a channels-last input") {
  Generator gen(1);
  const Tensor x = randn({2, 3, 4, 5}, {}, &gen);
  const Tensor nhwc = x.contiguous(MemoryFormat::ChannelsLast);
  CHECK_CLOSE(nn::Flatten()(nhwc), nn::Flatten()(x), 0, 0);
  // The value at feature c * H * W + h * W + w is x[n, c, h, w].
  CHECK(nn::Flatten()(nhwc).at({1, 2 * 20 + 3 * 5 + 4}) == x.at({1, 2, 3, 4}));
}

TEST_CASE("Flatten passes gradients back in the input's shape") {
  const Tensor x = ones({2, 3, 2, 2}).requires_grad_(true);
  sum(nn::Flatten()(x) * 3.0).backward();
  CHECK(shape_str(x.grad().sizes()) == "(2, 3, 2, 2)");
  CHECK(x.grad().to_vector<double>() == std::vector<double>(24, 3.0));
}

TEST_CASE("Flatten errors and printing") {
  CHECK_THROWS_WITH_FRAGMENT(nn::Flatten(2, 1)(zeros({2, 3, 4})), ValueError,
                             "[flatten] start_dim 2 comes after end_dim 1");
  CHECK_THROWS_AS(nn::Flatten(1, 5)(zeros({2, 3})), IndexError);
  CHECK(nn::Flatten().repr() == "Flatten(start_dim=1, end_dim=-1)");
  CHECK(nn::Flatten(0, 2).repr() == "Flatten(start_dim=0, end_dim=2)");
}

TEST_CASE("Unflatten undoes Flatten inside a Sequential, gradient included") {
  Generator gen(2);
  const Tensor x = randn({2, 3, 4, 5}, {}, &gen).requires_grad_(true);
  nn::Sequential net(std::make_shared<nn::Flatten>(), std::make_shared<nn::Unflatten>(1, Shape{3, -1, 5}));
  const Tensor y = net(x);
  CHECK(y.sizes() == x.sizes());
  CHECK_CLOSE(y, x, 0, 0);
  sum(y * 2.0).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(120, 2.0f));
  CHECK(nn::Unflatten(-1, {2, 2})(zeros({3, 4})).sizes() == Shape{3, 2, 2});
}

TEST_CASE("Unflatten checks its sizes at construction and its input at forward; it prints as PyTorch's") {
  CHECK_THROWS_WITH_FRAGMENT(nn::Unflatten(1, {}), ValueError, "[Unflatten] sizes must be one or more sizes");
  CHECK_THROWS_WITH_FRAGMENT(nn::Unflatten(1, {-1, 2, -1}), ValueError, "with at most one -1, got (-1, 2, -1)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Unflatten(1, {4, -3}), ValueError, "got (4, -3)");
  CHECK_THROWS_WITH_FRAGMENT(nn::Unflatten(1, {4, 4})(zeros({2, 12})), ShapeError,
                             "[unflatten] sizes (4, 4) multiply to 16 but dim 1 of shape (2, 12) has 12");
  CHECK(nn::Unflatten(1, {2, 5, 5}).repr() == "Unflatten(dim=1, unflattened_size=(2, 5, 5))");
  CHECK(nn::Unflatten(-1, {7}).repr() == "Unflatten(dim=-1, unflattened_size=(7,))");
}

}  // namespace
}  // namespace loom
