// File: tests/core/ops/pooling_int_test.cc
// The functional pooling overloads with an int kernel equal the options form.
#include <doctest/doctest.h>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {

TEST_CASE("max_pool2d(x, 2) and avg_pool2d(x, 3, 2, 1) equal their options form") {
  Generator gen(8);
  Tensor x = randn({2, 3, 7, 6}, {}, &gen);
  Tensor y = max_pool2d(x, 2);
  CHECK(y.sizes() == Shape{2, 3, 3, 3});
  CHECK_CLOSE(y, max_pool2d(x, Pool2dOptions{.kernel_size = {2, 2}}), 0, 0);
  Tensor z = avg_pool2d(x, 3, 2, 1);
  CHECK(z.sizes() == Shape{2, 3, 4, 3});
  CHECK_CLOSE(z,
              avg_pool2d(x, {.kernel_size = {3, 3}, .stride = {{2, 2}}, .padding = {1, 1}}), 0,
              0);
  CHECK_CLOSE(avg_pool2d(x, 2), avg_pool2d(x, Pool2dOptions{.kernel_size = {2, 2}}), 0, 0);
}

}  // namespace loom
