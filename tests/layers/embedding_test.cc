// File: tests/layers/embedding_test.cc
// Embedding: the table's name and shape, lookups, training moves only the rows
// that were used, repr and errors.
#include "layers/embedding.h"

#include <doctest/doctest.h>

#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {

TEST_CASE("Embedding holds a (V, D) \"weight\" and looks rows up") {
  Generator gen(41);
  nn::Embedding embed(5, 3, {.generator = &gen});
  CHECK(embed.state_dict().size() == 1);
  CHECK(embed.state_dict()[0].first == "weight");
  CHECK(embed.weight().sizes() == Shape{5, 3});
  CHECK(embed.repr() == "Embedding(5, 3)");
  Tensor tokens = tensor({4, 0, 4}, {3}, {.dtype = DType::Int64});
  Tensor v = embed(tokens);
  CHECK(v.sizes() == Shape{3, 3});
  CHECK_CLOSE(v.select(0, 0), embed.weight().select(0, 4), 0, 0);
  sum(v).backward();
  const std::vector<double> g = testing::values(embed.weight().grad());
  CHECK(g == std::vector<double>{1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2});
}

TEST_CASE("Embedding refuses an empty table") {
  CHECK_THROWS_WITH_FRAGMENT(nn::Embedding(0, 3), ValueError, "[Embedding] num_embeddings");
}

}  // namespace loom
