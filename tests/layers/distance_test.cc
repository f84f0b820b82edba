// File: tests/layers/distance_test.cc
// nn::CosineSimilarity and nn::PairwiseDistance: the functional ops with the
// module's options, inside a user's module (registered, printed, its
// gradients), and the one-tensor forward's refusal.
#include "layers/distance.h"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/linear.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

TEST_CASE("CosineSimilarity and PairwiseDistance compute the functional ops with their options") {
  Generator gen(81);
  const Tensor a = randn({3, 4, 5}, kF64, &gen), b = randn({3, 4, 5}, kF64, &gen);
  CHECK_CLOSE(nn::CosineSimilarity()(a, b), cosine_similarity(a, b, 1, 1e-8), 0, 0);
  CHECK_CLOSE(nn::CosineSimilarity(-1, 1e-3)(a, b), cosine_similarity(a, b, -1, 1e-3), 0, 0);
  CHECK_CLOSE(nn::PairwiseDistance()(a, b), pairwise_distance(a, b, 2.0, 1e-6, false), 0, 0);
  CHECK_CLOSE(nn::PairwiseDistance(1.0, 0.0, true)(a, b), pairwise_distance(a, b, 1.0, 0.0, true), 0, 0);
  CHECK(nn::PairwiseDistance(1.0, 0.0, true)(a, b).sizes() == Shape{3, 4, 1});
  CHECK(nn::CosineSimilarity().repr() == "CosineSimilarity()");
  CHECK(nn::PairwiseDistance().repr() == "PairwiseDistance()");
  nn::CosineSimilarity similarity;
  CHECK_THROWS_AS(similarity(a), TypeError);
}

// A siamese head as a user writes one: a shared projection, then the
// similarity of the two embeddings.
class Siamese : public nn::Module {
 public:
  Siamese() {
    project_ = register_module("project", std::make_shared<nn::Linear>(6, 4));
    similarity_ = register_module("similarity", std::make_shared<nn::CosineSimilarity>());
  }
  using nn::Module::forward;
  Tensor forward(const Tensor& a, const Tensor& b) { return (*similarity_)((*project_)(a), (*project_)(b)); }

 private:
  std::shared_ptr<nn::Linear> project_;
  std::shared_ptr<nn::CosineSimilarity> similarity_;
};

TEST_CASE("CosineSimilarity in a user's module: printed, and its gradient reaches the shared weights") {
  Generator gen(82);
  Siamese net;
  CHECK(net.repr().find("(similarity): CosineSimilarity()") != std::string::npos);
  const Tensor a = randn({5, 6}, {}, &gen), b = randn({5, 6}, {}, &gen);
  const Tensor s = net.forward(a, b);
  CHECK(s.sizes() == Shape{5});
  for (double v : s.to_vector<double>()) CHECK(std::abs(v) <= 1.0 + 1e-6);
  sum(s).backward();
  for (const Tensor& p : net.parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(sum(abs(p.grad())).item() > 0.0);
  }
}

}  // namespace
}  // namespace loom
