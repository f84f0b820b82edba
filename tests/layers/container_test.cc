// File: tests/layers/container_test.cc
// Sequential (names, push_back, indexing, forward, gradients) and Residual
// (children a and b or inner, x + branch(x)).
// B batch, F features.
#include "layers/container.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/testing.h"

namespace loom {
namespace {

std::vector<std::string> names_of(const nn::NamedTensors& entries) {
  std::vector<std::string> names;
  for (const auto& [name, t] : entries) names.push_back(name);
  return names;
}

TEST_CASE("Sequential names its children 0, 1, ... and nests names") {
  auto shared = std::make_shared<nn::Linear>(4, 4);
  nn::Sequential net(nn::Linear(3, 4), nn::ReLU(), shared);
  net.push_back(nn::Sequential(nn::Linear(4, 2), nn::Tanh()));
  CHECK(net.size() == 4);
  CHECK(names_of(net.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias",
                                                                     "2.weight", "2.bias",
                                                                     "3.0.weight", "3.0.bias"});
  CHECK(net.named_children()[3].first == "3");
  CHECK(&net[2] == shared.get());
  CHECK(net.ptr(2) == shared);
  CHECK(net.at<nn::Linear>(0).in_features() == 3);
  CHECK(net[1].type_name() == "ReLU");
}

TEST_CASE("Sequential forward chains its children; empty passes through") {
  Generator gen(1);
  nn::Sequential net(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2));
  const Tensor x = randn({5, 3}, {}, &gen);
  auto& fc1 = net.at<nn::Linear>(0);
  auto& fc2 = net.at<nn::Linear>(2);
  const Tensor expected =
      linear(relu(linear(x, fc1.weight(), fc1.bias())), fc2.weight(), fc2.bias());
  CHECK_CLOSE(net(x), expected, 0, 0);
  nn::Sequential empty;
  CHECK(empty.empty());
  CHECK(empty(x).is_same(x));
}

TEST_CASE("Sequential backward fills every parameter's grad") {
  Generator gen(2);
  nn::Sequential net(nn::Linear(3, 4), nn::Sigmoid(), nn::Linear(4, 1));
  const Tensor x = randn({6, 3}, {}, &gen);
  sum(net(x)).backward();
  auto& fc1 = net.at<nn::Linear>(0);
  auto& fc2 = net.at<nn::Linear>(2);
  const Tensor w1 = fc1.weight().detach().requires_grad_(true);
  const Tensor w2 = fc2.weight().detach().requires_grad_(true);
  sum(linear(sigmoid(linear(x, w1, fc1.bias().detach())), w2, fc2.bias().detach())).backward();
  CHECK_CLOSE(fc1.weight().grad(), w1.grad(), 1e-6, 1e-7);
  CHECK_CLOSE(fc2.weight().grad(), w2.grad(), 1e-6, 1e-7);
  CHECK(fc2.bias().grad().item() == 6.0);
}

TEST_CASE("a single Sequential argument is copied, sharing parameters") {
  nn::Sequential a(nn::Linear(2, 2), nn::ReLU());
  nn::Sequential b(a);
  CHECK(b.size() == 2);
  CHECK(b.parameters()[0].is_same(a.parameters()[0]));
  nn::Sequential nested;
  nested.push_back(a);
  CHECK(names_of(nested.named_parameters()) == std::vector<std::string>{"0.0.weight", "0.0.bias"});
}

TEST_CASE("Sequential indexing errors") {
  nn::Sequential net(nn::Linear(2, 2), nn::ReLU());
  CHECK_THROWS_WITH_FRAGMENT(net[2], IndexError,
                             "[Sequential] index 2 is out of range for a Sequential of 2 modules");
  CHECK_THROWS_WITH_FRAGMENT(net.at<nn::Conv2d>(0), TypeError,
                             "[Sequential.at] child 0 is a Linear");
}

TEST_CASE("Residual(a, b) is x + b(a(x)) with children a and b") {
  Generator gen(3);
  nn::Residual block(nn::Linear(3, 3), nn::Sequential(nn::Tanh(), nn::Linear(3, 3)));
  CHECK(names_of(block.named_parameters()) ==
        std::vector<std::string>{"a.weight", "a.bias", "b.1.weight", "b.1.bias"});
  const Tensor x = randn({2, 3}, {}, &gen);
  auto& a = dynamic_cast<nn::Linear&>(*block.named_children()[0].second);
  auto& b = dynamic_cast<nn::Sequential&>(*block.named_children()[1].second).at<nn::Linear>(1);
  const Tensor expected =
      x + linear(loom::tanh(linear(x, a.weight(), a.bias())), b.weight(), b.bias());
  CHECK_CLOSE(block(x), expected, 1e-6, 1e-7);
  CHECK(block.repr() ==
        "Residual(\n"
        "  (a): Linear(in_features=3, out_features=3, bias=True)\n"
        "  (b): Sequential(\n"
        "    (0): Tanh()\n"
        "    (1): Linear(in_features=3, out_features=3, bias=True)\n"
        "  )\n"
        ")");
}

TEST_CASE("Residual(inner) is x + inner(x); the branch must keep the shape") {
  nn::Residual block{nn::ReLU()};
  CHECK(block.named_children()[0].first == "inner");
  CHECK(block(tensor({-1, 2}, {2})).to_vector<double>() == std::vector<double>{-1, 4});
  const Tensor x = ones({1, 3}).requires_grad_(true);
  sum(block(x)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>(3, 2.0));
  nn::Residual narrowing(nn::Linear(3, 2));
  CHECK_THROWS_WITH_FRAGMENT(narrowing(ones({1, 3})), ShapeError,
                             "[Residual] the branch maps shape (1, 3) to (1, 2)");
}

}  // namespace
}  // namespace loom
