// File: tests/layers/fused_residual_test.cc
// nn::fuse matching residual adds (FusedResidual) on the CPU: resnet9 and a
// model of our own, fused and unfused, give bit-identical outputs, gradients,
// running statistics and SGD steps (the fused block adds in the same order),
// keep their state_dict names and tensors, and fuse only once; residuals whose
// branch does not end in a fused run keep their separate add.
//
// N batch, C channels, H, W, F features.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/fused.h"
#include "layers/models.h"
#include "layers/nn.h"
#include "optim/sgd.h"
#include "tests/layers/module_testing.h"
#include "tests/testing.h"

namespace loom {
namespace {

// Exactly equal, element for element.
#define CHECK_SAME_VALUES(actual, expected) CHECK_CLOSE(actual, expected, 0.0, 0.0)

// A model of our own holding its layers in a Sequential, as a user writes one:
// Residual(a, b) with a conv head (conv -> bn -> gelu), Residual(inner) with a
// batch-norm head and with a linear head, and a Residual that ends in an
// unfused Linear.
class SkipNet : public nn::Module {
 public:
  SkipNet() {
    body_ = register_module(
        "body",
        nn::Sequential(nn::Conv2d(3, 8, 3, {.padding = 1}),                                // (8, H, W)
                       nn::Residual(nn::Sequential(nn::Conv2d(8, 8, 3, {.padding = 1}), nn::ReLU()),
                                    nn::Sequential(nn::Conv2d(8, 8, 3, {.padding = 1, .bias = false}),
                                                   nn::BatchNorm2d(8), nn::GELU())),
                       nn::Residual(nn::Sequential(nn::BatchNorm2d(8), nn::ReLU())),     // inner
                       nn::Flatten(), nn::Linear(8 * 4 * 4, 16),                         // (16)
                       nn::Residual(nn::Sequential(nn::Linear(16, 16), nn::Tanh())),     // inner
                       nn::Residual(nn::Linear(16, 16), nn::Sequential(nn::Tanh(), nn::Linear(16, 16))),
                       nn::Linear(16, 4)));
  }
  Tensor forward(const Tensor& x) override { return body_->forward(x); }  // x (N, 3, 4, 4)
  nn::Sequential& body() { return *body_; }

 private:
  std::shared_ptr<nn::Sequential> body_;
};

// `fused` (a copy of `plain`'s weights) is fused here; then a training forward,
// backward and one SGD step on each must agree bit for bit, and so must an eval
// forward afterwards.
void check_fused_residuals_keep_model(nn::Module& plain, nn::Module& fused, const Shape& x_sizes,
                                      uint64_t seed) {
  Generator gen(seed);
  fused.load_state_dict(plain.state_dict());
  const std::vector<std::string> names = testing::state_dict_names(fused);
  const nn::NamedTensors params_before = fused.named_parameters();
  const StateDict state_before = fused.state_dict();
  nn::fuse(fused);
  CHECK(testing::state_dict_names(fused) == names);
  const nn::NamedTensors params = fused.named_parameters();
  REQUIRE(params.size() == params_before.size());
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(params[i].first);
    CHECK(params[i].second.is_same(params_before[i].second));  // an optimizer's list stays valid
  }
  const StateDict state_after = fused.state_dict();
  for (size_t i = 0; i < state_after.size(); ++i) {
    CAPTURE(state_after[i].first);
    CHECK(state_after[i].second.storage() == state_before[i].second.storage());
  }

  optim::SGD plain_opt(plain.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD fused_opt(fused.parameters(), {.lr = 0.1, .momentum = 0.9});
  const Tensor x = randn(x_sizes, {}, &gen);
  const Tensor y_plain = plain(x), y_fused = fused(x);
  CHECK_SAME_VALUES(y_fused, y_plain);
  const Tensor dy = randn(y_plain.sizes(), {}, &gen);
  y_plain.backward(dy);
  y_fused.backward(dy);
  const nn::NamedTensors plain_params = plain.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(params[i].first);
    REQUIRE(params[i].second.grad().defined());
    CHECK_SAME_VALUES(params[i].second.grad(), plain_params[i].second.grad());
  }
  plain_opt.step();
  fused_opt.step();
  const StateDict plain_state = plain.state_dict(), fused_state = fused.state_dict();
  for (size_t i = 0; i < plain_state.size(); ++i) {
    CAPTURE(plain_state[i].first);
    CHECK_SAME_VALUES(fused_state[i].second, plain_state[i].second);  // parameters after the step, buffers
  }
  plain.eval();
  fused.eval();
  CHECK_SAME_VALUES(fused(x), plain(x));
}

}  // namespace

TEST_CASE("fuse moves resnet9's residual adds into its blocks: bit-identical outputs, gradients and SGD step") {
  nn::Sequential plain = nn::resnet9(), fused = nn::resnet9();
  check_fused_residuals_keep_model(plain, fused, {2, 3, 8, 8}, 1);

  nn::Sequential net = nn::resnet9();
  nn::fuse(net);
  for (size_t i : {3, 8}) {
    CAPTURE(i);
    auto& residual = net.at<nn::FusedResidual>(i);
    CHECK(residual.type_name() == "FusedResidual");
    CHECK(residual.block().str() == "conv2d(stride=1, padding=1) -> batch_norm -> relu -> add_residual");
    // The fused batch-norm graph adds before its ReLU, so the add is a piece of its own.
    CHECK(residual.block().pieces_str() == "[conv2d(stride=1, padding=1)] [batch_norm -> relu] [add_residual]");
    auto& a = dynamic_cast<nn::Sequential&>(*residual.named_children()[0].second);
    CHECK(a[0].type_name() == "FusedConv2d");  // branch a is fused as a run of its own
  }
  CHECK(net.repr().find("(3): FusedResidual(\n") != std::string::npos);
  net.eval();
  CHECK(net.at<nn::FusedResidual>(3).block().pieces_str() ==
        "[conv2d(stride=1, padding=1)] [batch_norm(eval)] [relu -> add_residual]");
}

TEST_CASE("fuse matches Residual(a, b) and Residual(inner) in a model of our own, with conv, batch-norm and linear heads") {
  SkipNet plain, fused;
  check_fused_residuals_keep_model(plain, fused, {2, 3, 4, 4}, 2);

  const nn::Sequential& body = fused.body();
  const std::vector<std::string> types = {"Conv2d",  "FusedResidual", "FusedResidual", "Flatten",
                                          "Linear",  "FusedResidual", "Residual",      "Linear"};
  for (size_t i = 0; i < types.size(); ++i) {
    CAPTURE(i);
    CHECK(body[i].type_name() == types[i]);
  }
  CHECK(body.at<nn::FusedResidual>(1).block().str() ==
        "conv2d(stride=1, padding=1) -> batch_norm(eval) -> gelu -> add_residual");
  CHECK(body.at<nn::FusedResidual>(2).block().str() == "batch_norm(eval) -> relu -> add_residual");
  CHECK(body.at<nn::FusedResidual>(5).block().str() == "linear -> bias -> tanh -> add_residual");
  // A linear head's residual add is one more step of its epilogue, in one piece.
  CHECK(body.at<nn::FusedResidual>(5).block().pieces_str() == "[linear -> bias -> tanh -> add_residual]");
  CHECK(testing::state_dict_names(body.at<nn::FusedResidual>(2)) ==
        std::vector<std::string>{"inner.0.weight", "inner.0.bias", "inner.0.running_mean", "inner.0.running_var",
                                 "inner.0.num_batches_tracked"});
}

TEST_CASE("fusing residuals twice changes nothing, and keeps every module's mode") {
  nn::Sequential net = nn::resnet9();
  auto& a = *net.ptr(3)->named_children()[0].second;
  a.eval();  // a frozen branch inside a training model
  nn::fuse(net);
  const std::string repr = net.repr();
  const nn::NamedTensors params = net.named_parameters();
  nn::fuse(net);
  CHECK(net.repr() == repr);
  const nn::NamedTensors again = net.named_parameters();
  REQUIRE(again.size() == params.size());
  for (size_t i = 0; i < params.size(); ++i) CHECK(again[i].second.is_same(params[i].second));
  CHECK(net[3].is_training());
  CHECK_FALSE(net[3].named_children()[0].second->is_training());
  CHECK(net[3].named_children()[1].second->is_training());
}

TEST_CASE("a Residual whose last branch does not end in a fused run keeps its separate add") {
  nn::Sequential net(nn::Residual(nn::Sequential(nn::Conv2d(4, 4, 3, {.padding = 1}), nn::ReLU(), nn::Dropout(0.5))),
                     nn::Residual(nn::ReLU()),                                      // not a Sequential
                     nn::Residual(nn::Sequential(nn::Conv2d(4, 4, 1))),             // a lone conv is no run
                     nn::Residual(nn::Sequential(nn::ReLU(), nn::Conv2d(4, 4, 1))));
  nn::fuse(net);
  for (size_t i = 0; i < net.size(); ++i) {
    CAPTURE(i);
    CHECK(net[i].type_name() == "Residual");
  }
  auto& first = dynamic_cast<nn::Sequential&>(*net[0].named_children()[0].second);
  CHECK(first[0].type_name() == "FusedConv2d");  // the run inside the branch still fuses

  // The model itself is no Sequential's child: nothing can take its place.
  nn::Residual top(nn::Sequential(nn::Linear(3, 3), nn::ReLU()));
  nn::fuse(top);
  CHECK(top.type_name() == "Residual");
  CHECK(dynamic_cast<nn::Sequential&>(*top.named_children()[0].second)[0].type_name() == "FusedLinear");
}

TEST_CASE("a FusedResidual whose branch changed after fusing adds as a Residual does") {
  Generator gen(4);
  auto make = [] { return nn::Sequential(nn::Residual(nn::Sequential(nn::Linear(3, 3), nn::ReLU()))); };
  nn::Sequential plain = make(), fused = make();
  fused.load_state_dict(plain.state_dict());
  nn::fuse(fused);
  REQUIRE(fused[0].type_name() == "FusedResidual");
  for (nn::Sequential* net : {&plain, &fused}) {
    dynamic_cast<nn::Sequential&>(*(*net)[0].named_children()[0].second).push_back(nn::Tanh());
  }
  const Tensor x = randn({2, 3}, {}, &gen);
  CHECK_SAME_VALUES(fused(x), plain(x));  // x + tanh(relu(linear(x))), not x + relu(...) then tanh
  CHECK_THROWS_WITH_FRAGMENT(fused.at<nn::FusedResidual>(0).block(), ValueError,
                             "the last branch (inner: Sequential) does not end in a fused run");
}

TEST_CASE("FusedResidual errors: a branch that does not keep the shape, a Residual without a fused tail") {
  Generator gen(3);
  const Tensor x = randn({2, 3}, {}, &gen);
  for (int64_t out : {2, 1}) {  // (2, 1) would broadcast against x in a plain add
    CAPTURE(out);
    nn::Sequential plain(nn::Residual(nn::Sequential(nn::Linear(3, out), nn::ReLU())));
    nn::Sequential fused(nn::Residual(nn::Sequential(nn::Linear(3, out), nn::ReLU())));
    nn::fuse(fused);
    REQUIRE(fused[0].type_name() == "FusedResidual");
    CHECK_THROWS_WITH_FRAGMENT(plain(x), ShapeError, "[Residual] the branch maps shape (2, 3)");
    CHECK_THROWS_WITH_FRAGMENT(fused(x), ShapeError,
                               "add_residual: the residual has shape (2, 3) but the output it is added to has (2, " +
                                   std::to_string(out) + ")");
  }
  nn::Residual unfused(nn::Sequential(nn::Linear(3, 3), nn::ReLU()));
  CHECK_THROWS_WITH_FRAGMENT(nn::FusedResidual{unfused}, ValueError,
                             "the last branch (inner: Sequential) does not end in a fused run");
}

}  // namespace loom
