// File: tests/layers/softmax_test.cc
// Softmax and LogSoftmax modules are their ops over the chosen dim.
// N batch, C classes.
#include "layers/softmax.h"

#include <doctest/doctest.h>

#include <cmath>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

TEST_CASE("Softmax and LogSoftmax equal their ops, for any dim") {
  Generator gen(1);
  const Tensor x = randn({3, 4, 5}, {}, &gen);
  for (int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    CHECK_CLOSE(nn::Softmax(dim)(x), softmax(x, dim), 0, 0);
    CHECK_CLOSE(nn::LogSoftmax(dim)(x), log_softmax(x, dim), 0, 0);
  }
  const Tensor row = tensor({0, std::log(3.0)}, {1, 2});
  CHECK(nn::Softmax(1)(row).at({0, 1}) == doctest::Approx(0.75));
  CHECK(nn::LogSoftmax(1)(row).at({0, 0}) == doctest::Approx(std::log(0.25)));
  CHECK_THROWS_AS(nn::Softmax(3)(x), IndexError);
}

TEST_CASE("Softmax and LogSoftmax print their dim") {
  CHECK(nn::Softmax(1).repr() == "Softmax(dim=1)");
  CHECK(nn::LogSoftmax(-1).repr() == "LogSoftmax(dim=-1)");
  CHECK(nn::Softmax(0).dim() == 0);
}

}  // namespace
}  // namespace loom
