// File: tests/layers/module_test.cc
// Module: registration and dotted names, shared modules, train/eval, in-place
// to(dtype / memory format), state_dict / load_state_dict (round trip and
// every error), zero_grad and printing.
// N batch, C channels, H, W.
#include "layers/module.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/testing.h"

namespace loom {
namespace {

// A module that exposes registration, to test it directly.
class Toy : public nn::Module {
 public:
  Toy() {
    scale_ = register_parameter("scale", ones({3}));
    count_ = register_buffer("count", zeros({}, {.dtype = DType::Int64}));
  }
  Tensor forward(const Tensor& x) override { return x * scale_; }
  std::string type_name() const override { return "Toy"; }
  std::string extra_repr() const override { return "features=3"; }

  void add_parameter(const std::string& name, const Tensor& t) { register_parameter(name, t); }
  void add_buffer(const std::string& name, const Tensor& t) { register_buffer(name, t); }
  void add_child(const std::string& name, std::shared_ptr<nn::Module> m) {
    register_module(name, std::move(m));
  }

 private:
  Tensor scale_;
  Tensor count_;
};

std::vector<std::string> names_of(const nn::NamedTensors& entries) {
  std::vector<std::string> names;
  for (const auto& [name, t] : entries) names.push_back(name);
  return names;
}

Tensor entry(const StateDict& state, const std::string& name) {
  for (const auto& [key, t] : state) {
    if (key == name) return t;
  }
  FAIL("no entry " << name);
  return Tensor();
}

StateDict without(const StateDict& state, const std::string& name) {
  StateDict out;
  for (const auto& e : state) {
    if (e.first != name) out.push_back(e);
  }
  return out;
}

StateDict replaced(const StateDict& state, const std::string& name, const Tensor& value) {
  StateDict out = state;
  for (auto& e : out) {
    if (e.first == name) e.second = value;
  }
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> u = a.to_vector<double>(), v = b.to_vector<double>();
  REQUIRE(u.size() == v.size());
  double worst = 0;
  for (size_t i = 0; i < u.size(); ++i) worst = std::max(worst, std::abs(u[i] - v[i]));
  return worst;
}

Tensor batch(uint64_t seed, int64_t n = 4) {
  Generator gen(seed);
  return randn({n, 1, 28, 28}, {}, &gen);
}

TEST_CASE("parameters, buffers and children are listed in registration order with dotted names") {
  Toy toy;
  toy.add_child("body", std::make_shared<nn::Sequential>(nn::Linear(2, 3), nn::BatchNorm2d(3)));
  toy.add_parameter("offset", zeros({2}));
  CHECK(names_of(toy.named_parameters()) ==
        std::vector<std::string>{"scale", "offset", "body.0.weight", "body.0.bias", "body.1.weight",
                                 "body.1.bias"});
  CHECK(names_of(toy.named_buffers()) == std::vector<std::string>{"count", "body.1.running_mean",
                                                                  "body.1.running_var",
                                                                  "body.1.num_batches_tracked"});
  // state_dict: each module's parameters, then its buffers, then its children's, as PyTorch.
  CHECK(names_of(toy.state_dict()) ==
        std::vector<std::string>{"scale", "offset", "count", "body.0.weight", "body.0.bias",
                                 "body.1.weight", "body.1.bias", "body.1.running_mean",
                                 "body.1.running_var", "body.1.num_batches_tracked"});
  CHECK(toy.children().size() == 1);
  CHECK(toy.num_parameters() == 3 + 2 + 6 + 3 + 3 + 3);
  for (const Tensor& p : toy.parameters()) CHECK((p.requires_grad() && p.is_leaf()));
  for (const auto& [name, b] : toy.named_buffers()) CHECK_FALSE(b.requires_grad());
}

TEST_CASE("registration rejects bad and repeated names") {
  Toy toy;
  CHECK_THROWS_WITH_FRAGMENT(toy.add_parameter("scale", zeros({1})), ValueError,
                             "[Toy] the name \"scale\" is already registered");
  CHECK_THROWS_WITH_FRAGMENT(toy.add_child("count", std::make_shared<nn::ReLU>()), ValueError,
                             "\"count\" is already registered");
  CHECK_THROWS_WITH_FRAGMENT(toy.add_buffer("a.b", zeros({1})), ValueError, "invalid name \"a.b\"");
  CHECK_THROWS_WITH_FRAGMENT(toy.add_parameter("", zeros({1})), ValueError, "invalid name \"\"");
  CHECK_THROWS_WITH_FRAGMENT(toy.add_parameter("w", Tensor()), ValueError,
                             "parameter \"w\" is undefined");
  CHECK_THROWS_WITH_FRAGMENT(toy.add_child("c", nullptr), ValueError, "child module \"c\" is null");
  CHECK_THROWS_WITH_FRAGMENT(toy.add_parameter("i", zeros({2}, {.dtype = DType::Int64})), TypeError,
                             "only floating-point tensors can require grad");
}

TEST_CASE("a module shared twice lists its parameters once but saves both names") {
  auto shared = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential net(shared, nn::ReLU(), shared);
  CHECK(names_of(net.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias"});
  CHECK(net.parameters().size() == 2);
  CHECK(net.num_parameters() == 6);
  CHECK(names_of(net.state_dict()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
}

TEST_CASE("named_modules lists descendants parents first, shared ones once") {
  auto shared = std::make_shared<nn::ReLU>();
  nn::Sequential net(nn::Residual(nn::Linear(2, 2), nn::Sequential(nn::Tanh(), shared)), shared);
  std::vector<std::string> names, types;
  for (const auto& [name, module] : net.named_modules()) {
    names.push_back(name);
    types.push_back(module->type_name());
  }
  CHECK(names == std::vector<std::string>{"0", "0.a", "0.b", "0.b.0", "0.b.1"});
  CHECK(types == std::vector<std::string>{"Residual", "Linear", "Sequential", "Tanh", "ReLU"});
}

TEST_CASE("train and eval switch the whole tree") {
  nn::Sequential net(nn::Sequential(nn::Dropout(0.5)), nn::BatchNorm2d(2));
  net.push_back(nn::Sequential(nn::Linear(2, 2), nn::Dropout()));
  auto all_modes = [&](bool expected) {
    CHECK(net.is_training() == expected);
    CHECK(net[0].is_training() == expected);
    CHECK(net[1].is_training() == expected);
    CHECK(net.at<nn::Sequential>(2)[1].is_training() == expected);
  };
  all_modes(true);
  net.eval();
  all_modes(false);
  net.train();
  all_modes(true);
  net.train(false);
  all_modes(false);
}

TEST_CASE("to(DType) converts floating parameters and buffers in place") {
  manual_seed(1);
  nn::Sequential net = nn::mnist_net();
  const std::vector<Tensor> held = net.parameters();  // as an optimizer would hold them
  const Tensor before = held[0].detach().clone();
  net(batch(1)).backward(ones({4, 10}));
  net.to(DType::Float64);
  for (const Tensor& p : held) {
    CHECK(p.dtype() == DType::Float64);
    CHECK((p.requires_grad() && p.is_leaf()));
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::Float64);
  }
  CHECK_CLOSE(held[0], before.to(DType::Float64), 0, 0);
  CHECK(entry(net.state_dict(), "1.num_batches_tracked").dtype() == DType::Int64);
  CHECK(entry(net.state_dict(), "1.running_var").dtype() == DType::Float64);
  Tensor y = net(batch(2).to(DType::Float64));
  CHECK(y.dtype() == DType::Float64);
  net.zero_grad();
  y.backward(ones({4, 10}, {.dtype = DType::Float64}));
  CHECK(held.back().grad().dtype() == DType::Float64);
  CHECK_THROWS_WITH_FRAGMENT(net.to(DType::Int64), TypeError,
                             "[Sequential.to] modules convert only to floating dtypes");
}

TEST_CASE("to(MemoryFormat::ChannelsLast) relayouts 4-D weights only, keeping values") {
  manual_seed(2);
  nn::Sequential net = nn::mnist_net(), reference = nn::mnist_net();
  reference.load_state_dict(net.state_dict());
  const Tensor conv_weight = net.at<nn::Conv2d>(4).weight();  // (64, 32, 3, 3)
  const Shape linear_strides = net.at<nn::Linear>(9).weight().strides();
  net.to(MemoryFormat::ChannelsLast);
  CHECK(conv_weight.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(conv_weight.is_contiguous());
  CHECK(conv_weight.requires_grad());
  CHECK(net.at<nn::Linear>(9).weight().strides() == linear_strides);
  CHECK_CLOSE(conv_weight, reference.at<nn::Conv2d>(4).weight(), 0, 0);
  const Tensor x = batch(3);
  CHECK_CLOSE(net(x), reference(x), 1e-5, 1e-5);
  net.to(MemoryFormat::Contiguous);
  CHECK(conv_weight.is_contiguous());
  CHECK_THROWS_WITH_FRAGMENT(net.to(MemoryFormat::Preserve), ValueError,
                             "[Sequential.to] takes MemoryFormat::Contiguous or "
                             "MemoryFormat::ChannelsLast");
}

TEST_CASE("state_dict shares memory with the module and carries no autograd") {
  nn::Linear fc(3, 2);
  const StateDict state = fc.state_dict();
  Tensor w = entry(state, "weight");
  CHECK_FALSE(w.requires_grad());
  w.fill_(0.25);
  CHECK(fc.weight().to_vector<double>() == std::vector<double>(6, 0.25));
}

TEST_CASE("load_state_dict round trip: same outputs, buffers included") {
  manual_seed(3);
  nn::Sequential source = nn::mnist_net();
  source(batch(4));  // moves running stats and num_batches_tracked away from their defaults
  manual_seed(4);
  nn::Sequential target = nn::mnist_net();
  source.eval();
  target.eval();
  const Tensor x = batch(5);
  CHECK(max_abs_diff(source(x), target(x)) > 1e-3);
  target.load_state_dict(source.state_dict());
  CHECK_CLOSE(target(x), source(x), 0, 0);
  for (const auto& [name, t] : source.state_dict()) {
    CAPTURE(name);
    CHECK_CLOSE(entry(target.state_dict(), name), t, 0, 0);
  }
  CHECK(entry(target.state_dict(), "5.num_batches_tracked").item() == 1);
}

TEST_CASE("load_state_dict lists missing and unexpected keys") {
  nn::Sequential net = nn::mnist_net();
  const StateDict good = net.state_dict();
  CHECK_THROWS_WITH_FRAGMENT(net.load_state_dict(without(good, "1.running_var")), ValueError,
                             "[load_state_dict] Sequential: the state's names do not match the "
                             "model's:\n  missing keys: \"1.running_var\"");
  StateDict extra = good;
  extra.emplace_back("12.weight", zeros({2}));
  extra.emplace_back("0.scale", zeros({2}));
  CHECK_THROWS_WITH_FRAGMENT(net.load_state_dict(extra), ValueError,
                             "unexpected keys: \"12.weight\", \"0.scale\"");
  StateDict both = without(without(good, "0.weight"), "11.bias");
  both.emplace_back("0.kernel", zeros({2}));
  CHECK_THROWS_WITH_FRAGMENT(net.load_state_dict(both), ValueError,
                             "missing keys: \"0.weight\", \"11.bias\"\n  unexpected keys: "
                             "\"0.kernel\"");
  CHECK_THROWS_WITH_FRAGMENT(net.load_state_dict(both), ValueError, "strict = false");
}

TEST_CASE("load_state_dict checks shapes, dtypes, duplicates and undefined tensors") {
  nn::Sequential net = nn::mnist_net();
  const StateDict good = net.state_dict();
  CHECK_THROWS_WITH_FRAGMENT(net.load_state_dict(replaced(good, "0.weight", zeros({32, 1, 5, 5}))),
                             ShapeError,
                             "size mismatch for\n  0.weight: the state has shape (32, 1, 5, 5), "
                             "the model (32, 1, 3, 3)");
  CHECK_THROWS_WITH_FRAGMENT(
      net.load_state_dict(replaced(good, "1.num_batches_tracked", zeros({}))), TypeError,
      "dtype mismatch for\n  1.num_batches_tracked: the state has float32, the model int64");
  CHECK_THROWS_WITH_FRAGMENT(
      net.load_state_dict(replaced(good, "9.bias", zeros({128}, {.dtype = DType::Float64}))),
      TypeError, "9.bias: the state has float64, the model float32");
  StateDict twice = good;
  twice.push_back(good[1]);
  CHECK_THROWS_WITH_FRAGMENT(net.load_state_dict(twice), ValueError,
                             "the state lists \"0.bias\" twice");
  CHECK_THROWS_WITH_FRAGMENT(net.load_state_dict(replaced(good, "4.bias", Tensor())), ValueError,
                             "\"4.bias\" is an undefined tensor");
  // Shape checks apply when strict is off too.
  CHECK_THROWS_WITH_FRAGMENT(
      net.load_state_dict(replaced(good, "11.weight", zeros({10, 64})), /*strict=*/false),
      ShapeError, "11.weight: the state has shape (10, 64), the model (10, 128)");
}

TEST_CASE("a failed load writes nothing") {
  manual_seed(5);
  nn::Sequential net = nn::mnist_net();
  const StateDict saved = net.state_dict();
  std::vector<Tensor> before;
  for (const auto& [name, t] : saved) before.push_back(t.clone());
  StateDict bad;
  for (const auto& [name, t] : saved) bad.emplace_back(name, zeros_like(t));
  bad.back().second = zeros({1});  // the last entry has the wrong shape
  CHECK_THROWS_AS(net.load_state_dict(bad), ShapeError);
  const StateDict after = net.state_dict();
  for (size_t i = 0; i < after.size(); ++i) {
    CAPTURE(after[i].first);
    CHECK_CLOSE(after[i].second, before[i], 0, 0);
  }
}

TEST_CASE("load_state_dict with strict = false loads what matches") {
  nn::Sequential net = nn::mnist_net();
  const Tensor kept = net.at<nn::Linear>(11).weight().detach().clone();
  StateDict partial;
  partial.emplace_back("0.bias", full({32}, 0.5));
  partial.emplace_back("1.num_batches_tracked", full({}, 7, {.dtype = DType::Int64}));
  partial.emplace_back("head.weight", zeros({3}));
  net.load_state_dict(partial, /*strict=*/false);
  CHECK(net.at<nn::Conv2d>(0).bias().to_vector<double>() == std::vector<double>(32, 0.5));
  CHECK(net.at<nn::BatchNorm2d>(1).num_batches_tracked().item() == 7);
  CHECK_CLOSE(net.at<nn::Linear>(11).weight(), kept, 0, 0);
}

TEST_CASE("load_state_dict accepts a state laid out differently") {
  manual_seed(6);
  nn::Sequential source = nn::mnist_net(), target = nn::mnist_net();
  source.to(MemoryFormat::ChannelsLast);
  target.load_state_dict(source.state_dict());
  CHECK(target.at<nn::Conv2d>(4).weight().is_contiguous());
  CHECK_CLOSE(target.at<nn::Conv2d>(4).weight(), source.at<nn::Conv2d>(4).weight(), 0, 0);
}

TEST_CASE("zero_grad clears every parameter's grad") {
  nn::Sequential net(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 1));
  sum(net(ones({2, 3}))).backward();
  for (const Tensor& p : net.parameters()) CHECK(p.grad().defined());
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("printing nests children under their names and ends with the parameter count") {
  Toy toy;
  toy.add_child("head", std::make_shared<nn::Sequential>(nn::Linear(3, 2), nn::ReLU()));
  toy.add_child("act", std::make_shared<nn::Tanh>());
  const std::string expected =
      "Toy(\n"
      "  features=3\n"
      "  (head): Sequential(\n"
      "    (0): Linear(in_features=3, out_features=2, bias=True)\n"
      "    (1): ReLU()\n"
      "  )\n"
      "  (act): Tanh()\n"
      ")";
  CHECK(toy.repr() == expected);
  CHECK(toy.str() == expected + "\nTotal parameters: 11");
  std::ostringstream out;
  out << toy;
  CHECK(out.str() == toy.str());
  CHECK(nn::Linear(1000, 1000).str().ends_with("Total parameters: 1,001,000"));
}

}  // namespace
}  // namespace loom
