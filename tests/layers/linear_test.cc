// File: tests/layers/linear_test.cc
// Linear: forward equals loom::linear with the layer's weights (2-D and batched
// input), parameter shapes, gradients, errors and printing.
// B batch, T extra leading dim.
#include "layers/linear.h"

#include <doctest/doctest.h>

#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

TEST_CASE("Linear forward is linear with the layer's weight and bias") {
  Generator gen(1);
  nn::Linear fc(5, 3);
  const Tensor x = randn({4, 5}, {}, &gen);
  CHECK_CLOSE(fc(x), linear(x, fc.weight(), fc.bias()), 0, 0);
  const Tensor xt = randn({5, 4}, {}, &gen).t();  // a transposed view
  CHECK_CLOSE(fc(xt), linear(xt.contiguous(), fc.weight(), fc.bias()), 1e-6, 1e-6);
  const Tensor x3 = randn({2, 4, 5}, {}, &gen);  // (B, T, in)
  CHECK(shape_str(fc(x3).sizes()) == "(2, 4, 3)");
  nn::Linear no_bias(5, 3, {.bias = false});
  CHECK_CLOSE(no_bias(x), linear(x, no_bias.weight()), 0, 0);
}

TEST_CASE("Linear hand-checked: y = x . W^T + b") {
  nn::Linear fc(2, 1);
  fc.load_state_dict({{"weight", tensor({2, -1}, {1, 2})}, {"bias", tensor({0.5}, {1})}});
  CHECK(fc(tensor({3, 4, 1, 1}, {2, 2})).to_vector<double>() == std::vector<double>{2.5, 1.5});
}

TEST_CASE("Linear parameters and gradients") {
  nn::Linear fc(4, 3);
  CHECK(shape_str(fc.weight().sizes()) == "(3, 4)");
  CHECK(shape_str(fc.bias().sizes()) == "(3,)");
  CHECK(fc.in_features() == 4);
  CHECK(fc.out_features() == 3);
  CHECK(fc.num_parameters() == 15);
  CHECK_FALSE(nn::Linear(4, 3, {.bias = false}).bias().defined());
  const Tensor x = ones({2, 4});
  sum(fc(x)).backward();
  CHECK(fc.weight().grad().to_vector<double>() == std::vector<double>(12, 2.0));
  CHECK(fc.bias().grad().to_vector<double>() == std::vector<double>(3, 2.0));
}

TEST_CASE("Linear errors and printing") {
  CHECK_THROWS_WITH_FRAGMENT(nn::Linear(0, 3), ValueError,
                             "[Linear] in_features and out_features must be positive, got 0 and 3");
  nn::Linear fc(4, 3);
  CHECK_THROWS_WITH_FRAGMENT(fc(zeros({2, 5})), ShapeError, "[linear] input of shape (2, 5)");
  CHECK(fc.repr() == "Linear(in_features=4, out_features=3, bias=True)");
  CHECK(nn::Linear(4, 3, {.bias = false}).repr() ==
        "Linear(in_features=4, out_features=3, bias=False)");
}

}  // namespace
}  // namespace loom
