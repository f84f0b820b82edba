// File: tests/core/ops/embedding_test.cc
// embedding: rows at indices of any shape, the scatter-add backward with
// repeated indices, float64 gradcheck and errors.
#include "core/ops/embedding.h"

#include <doctest/doctest.h>

#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {

TEST_CASE("embedding looks up rows for indices of any shape") {
  Tensor table = tensor({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor tokens = tensor({2, 0, 2, 1}, {2, 2}, {.dtype = DType::Int64});
  Tensor v = embedding(table, tokens);
  CHECK(v.sizes() == Shape{2, 2, 2});
  CHECK(testing::values(v) == std::vector<double>{20, 21, 0, 1, 20, 21, 10, 11});
  CHECK(embedding(table, zeros({}, {.dtype = DType::Int64})).sizes() == Shape{2});
}

TEST_CASE("embedding's backward adds the gradient of each use into its row") {
  Tensor table = zeros({4, 3}, {.dtype = DType::Float64}).requires_grad_(true);
  Tensor tokens = tensor({1, 3, 1, 1}, {2, 2}, {.dtype = DType::Int64});
  sum(embedding(table, tokens)).backward();
  CHECK(testing::values(table.grad()) == std::vector<double>{0, 0, 0, 3, 3, 3, 0, 0, 0, 1, 1, 1});
  Generator gen(21);
  Tensor t = randn({5, 4}, {.dtype = DType::Float64}, &gen).requires_grad_(true);
  Tensor ids = randint(0, 5, {3, 6}, {.dtype = DType::Int64}, &gen);
  GradcheckResult r =
      gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], ids); }, {t});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("embedding errors name the op and the values") {
  Tensor table = zeros({3, 2});
  CHECK_THROWS_WITH_FRAGMENT(embedding(table, tensor({3}, {1}, {.dtype = DType::Int64})),
                             IndexError, "index 3 (element 0");
  CHECK_THROWS_WITH_FRAGMENT(embedding(zeros({3}), zeros({1}, {.dtype = DType::Int64})), ShapeError,
                             "[embedding] weight must be a 2-D table");
}

}  // namespace loom
