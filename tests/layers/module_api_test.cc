// File: tests/layers/module_api_test.cc
// The libtorch-style module API: typed register_module (from a shared_ptr or a
// layer value with braced options), the default type_name(), modules whose
// forward takes other arguments, and ModuleList / ModuleDict with PyTorch's
// state_dict names.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/layers/module_testing.h"
#include "tests/testing.h"

namespace loom {
namespace {

// Written as a user would: no type_name override, typed members.
class TinyNet : public nn::Module {
 public:
  TinyNet() {
    conv1_ = register_module(
        "conv1", std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}));
    conv2_ = register_module("conv2", nn::Conv2d(4, 2, 3, {.padding = 1, .bias = false}));
    scale_ = register_parameter("scale", ones({1}));
  }
  Tensor forward(const Tensor& x) override {
    return conv2_->forward(relu(conv1_->forward(x))) * scale_;
  }

  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::Conv2d> conv2_;
  Tensor scale_;
};

// Two inputs, two outputs: called through forward, not operator().
class PairNet : public nn::Module {
 public:
  PairNet() { fc_ = register_module("fc", nn::Linear(3, 2)); }
  std::pair<Tensor, Tensor> forward(const Tensor& a, const Tensor& b) {
    return {fc_->forward(a), fc_->forward(a + b)};
  }

 private:
  std::shared_ptr<nn::Linear> fc_;
};

template <int K>
class Templated : public nn::Module {};

}  // namespace

TEST_CASE("register_module returns the typed holder, from a pointer or a value") {
  TinyNet net;
  static_assert(std::is_same_v<decltype(net.conv1_), std::shared_ptr<nn::Conv2d>>);
  CHECK(net.conv1_->options().padding == nn::Size2(1));
  CHECK(net.conv2_->options().padding == nn::Size2(1));
  CHECK_FALSE(net.conv2_->bias().defined());
  CHECK(net.conv1_.get() == net.named_children()[0].second.get());
  CHECK(testing::state_dict_names(net) ==
        std::vector<std::string>{"scale", "conv1.weight", "conv1.bias", "conv2.weight"});
  Generator gen(1);
  Tensor y = net(randn({2, 1, 5, 5}, {}, &gen));
  CHECK(y.sizes() == Shape{2, 2, 5, 5});
}

TEST_CASE("type_name defaults to the class's own name") {
  CHECK(TinyNet().type_name() == "TinyNet");
  CHECK(PairNet().type_name() == "PairNet");
  CHECK(Templated<3>().type_name() == "Templated");
  CHECK(TinyNet().repr().rfind("TinyNet(\n  (conv1): Conv2d(1, 4", 0) == 0);
}

TEST_CASE("a module with another forward signature runs directly, and says so through operator()") {
  PairNet net;
  Generator gen(2);
  Tensor a = randn({4, 3}, {}, &gen), b = randn({4, 3}, {}, &gen);
  auto [p, q] = net.forward(a, b);
  CHECK(p.sizes() == Shape{4, 2});
  CHECK(q.sizes() == Shape{4, 2});
  CHECK_THROWS_WITH_AS(net(a), doctest::Contains("[PairNet] has no forward(const Tensor&)"),
                       TypeError);
}

TEST_CASE("ModuleList names children 0, 1, ... and iterates in order") {
  class Stack : public nn::Module {
   public:
    Stack() {
      layers_ = register_module("layers", nn::ModuleList(nn::Linear(3, 5), nn::Linear(5, 2)));
      layers_->push_back(std::make_shared<nn::ReLU>());
    }
    Tensor forward(const Tensor& x) override {
      Tensor y = x;
      for (const auto& layer : *layers_) y = (*layer)(y);
      return y;
    }
    std::shared_ptr<nn::ModuleList> layers_;
  };
  Stack net;
  CHECK(net.layers_->size() == 3);
  CHECK(testing::state_dict_names(net) == std::vector<std::string>{"layers.0.weight", "layers.0.bias",
                                                     "layers.1.weight", "layers.1.bias"});
  CHECK(net.layers_->at<nn::Linear>(1).out_features() == 2);
  CHECK_THROWS_AS(net.layers_->at<nn::Conv2d>(0), TypeError);
  CHECK_THROWS_AS(net.layers_->ptr(3), IndexError);
  CHECK_THROWS_AS((*net.layers_)(zeros({1, 3})), TypeError);
  Tensor y = net(ones({2, 3}));
  CHECK(y.sizes() == Shape{2, 2});
  for (double v : testing::values(y)) CHECK(v >= 0.0);
}

TEST_CASE("ModuleDict keeps insertion order and PyTorch's names") {
  nn::ModuleDict heads;
  heads.insert("digits", nn::Linear(4, 10));
  heads.insert("parity", std::make_shared<nn::Linear>(4, 2, nn::LinearOptions{.bias = false}));
  CHECK(heads.keys() == std::vector<std::string>{"digits", "parity"});
  CHECK(heads.contains("parity"));
  CHECK_FALSE(heads.contains("colour"));
  CHECK(heads.at<nn::Linear>("digits").out_features() == 10);
  CHECK(testing::state_dict_names(heads) ==
        std::vector<std::string>{"digits.weight", "digits.bias", "parity.weight"});
  CHECK_THROWS_WITH_AS(heads.ptr("colour"), doctest::Contains("the keys are: digits, parity"),
                       IndexError);
  CHECK_THROWS_AS(heads.insert("digits", nn::ReLU()), ValueError);
  CHECK_THROWS_AS(heads.insert("a.b", nn::ReLU()), ValueError);
}

}  // namespace loom
