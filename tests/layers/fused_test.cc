// File: tests/layers/fused_test.cc
// nn::fuse and the fused layers on the CPU: the reference models keep their
// state_dict names and tensors, give the same outputs, gradients and running
// statistics as before fusing, print the fused layers, and fuse only once.
//
// N batch, C channels, H, W.
#include "layers/fused.h"

#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/layers/module_testing.h"
#include "tests/testing.h"

namespace loom {
namespace {

using ModelFn = std::function<nn::Sequential()>;

// Two copies of one model, the second fused; a training step on each (forward,
// backward) must agree in output, every gradient and every buffer, and so must
// an eval forward.
void check_fuse_keeps_model(const ModelFn& make, const Shape& x_sizes, uint64_t seed) {
  Generator gen(seed);
  nn::Sequential plain = make(), fused = make();
  fused.load_state_dict(plain.state_dict());
  const std::vector<std::string> names = testing::state_dict_names(fused);
  const nn::NamedTensors params_before = fused.named_parameters();
  nn::fuse(fused);
  CHECK(testing::state_dict_names(fused) == names);
  const nn::NamedTensors params_after = fused.named_parameters();
  REQUIRE(params_after.size() == params_before.size());
  for (size_t i = 0; i < params_after.size(); ++i) {
    CHECK(params_after[i].second.is_same(params_before[i].second));  // an optimizer's list stays valid
  }

  Tensor x = randn(x_sizes, {}, &gen);
  Tensor y_plain = plain(x), y_fused = fused(x);
  CHECK_CLOSE(y_fused, y_plain, 1e-5, 1e-6);
  Tensor dy = randn(y_plain.sizes(), {}, &gen);
  y_plain.backward(dy);
  y_fused.backward(dy);
  nn::NamedTensors grads_plain = plain.named_parameters();
  for (size_t i = 0; i < params_after.size(); ++i) {
    CAPTURE(params_after[i].first);
    REQUIRE(params_after[i].second.grad().defined());
    CHECK_CLOSE(params_after[i].second.grad(), grads_plain[i].second.grad(), 1e-4, 1e-5);
  }
  StateDict state_plain = plain.state_dict(), state_fused = fused.state_dict();
  for (size_t i = 0; i < state_plain.size(); ++i) {
    CAPTURE(state_plain[i].first);
    CHECK_CLOSE(state_fused[i].second, state_plain[i].second, 1e-5, 1e-6);
  }
  plain.eval();
  fused.eval();
  CHECK_CLOSE(fused(x), plain(x), 1e-5, 1e-6);
}

}  // namespace

TEST_CASE("fuse keeps mnist_net's names, tensors, outputs, gradients and running statistics") {
  check_fuse_keeps_model(nn::mnist_net, {2, 1, 28, 28}, 1);
}

TEST_CASE("fuse keeps lenet5's names, tensors, outputs and gradients") {
  check_fuse_keeps_model(nn::lenet5, {2, 1, 28, 28}, 2);
}

TEST_CASE("fuse keeps convolutions that pad their input first (same with an even filter, reflect)") {
  check_fuse_keeps_model(
      [] {
        return nn::Sequential(nn::Conv2d(3, 8, 4, {.padding = nn::Padding::Same}), nn::BatchNorm2d(8), nn::ReLU(),
                              nn::Conv2d(8, 4, 3, {.padding = 1, .padding_mode = PadMode::Reflect}), nn::ReLU(),
                              nn::Conv2d(4, 4, 2, {.padding = nn::Padding::Same, .padding_mode = PadMode::Replicate}),
                              nn::ReLU());
      },
      {2, 3, 7, 6}, 5);
}

TEST_CASE("fuse reaches into resnet9's residual blocks and keeps the model") {
  check_fuse_keeps_model(nn::resnet9, {2, 3, 8, 8}, 3);
  nn::Sequential net = nn::resnet9();
  nn::fuse(net);
  auto& block = dynamic_cast<nn::Sequential&>(*net.ptr(3)->named_children()[0].second);  // 3.a
  CHECK(block[0].type_name() == "FusedConv2d");
  CHECK(block[1].type_name() == "FusedBatchNorm2d");
  CHECK(block[2].type_name() == "Identity");
}

TEST_CASE("a fused batch norm (and BatchNormReLU) counts batches and averages cumulatively as BatchNorm2d does") {
  Generator gen(4);
  auto make = [] {
    return nn::Sequential(nn::BatchNorm2d(3, {.momentum = std::nullopt}), nn::ReLU());
  };
  nn::Sequential plain = make(), fused = make();
  nn::fuse(fused);
  nn::BatchNormReLU by_name(nn::BatchNorm2d(3, {.momentum = std::nullopt}));
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({4, 3, 2, 2}, {}, &gen);
    Tensor y = plain(x);
    CHECK_CLOSE(fused(x), y, 1e-6, 1e-7);
    CHECK_CLOSE(by_name(x), y, 1e-6, 1e-7);
  }
  const auto& bn = fused.at<nn::FusedBatchNorm2d>(0);
  CHECK(bn.num_batches_tracked().item() == 3);
  CHECK_CLOSE(bn.running_var(), plain.at<nn::BatchNorm2d>(0).running_var(), 1e-6, 1e-7);
  CHECK(by_name.num_batches_tracked().item() == 3);
}

TEST_CASE("fused models print their fused layers, and fusing twice changes nothing") {
  nn::Sequential net = nn::mnist_net();
  nn::fuse(net);
  const std::string repr = net.repr();
  CHECK(repr.find("(0): FusedConv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))") !=
        std::string::npos);  // runs the BatchNorm2d and the ReLU after it too
  CHECK(repr.find("(1): FusedBatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, "
                  "track_running_stats=True)") != std::string::npos);
  CHECK(repr.find("(2): Identity()") != std::string::npos);
  CHECK(repr.find("(9): FusedLinear(in_features=3136, out_features=128, bias=True)") !=
        std::string::npos);
  CHECK(repr.find("ReLU()") == std::string::npos);
  nn::fuse(net);
  CHECK(net.repr() == repr);

  nn::Sequential lenet = nn::lenet5();
  nn::fuse(lenet);
  CHECK(lenet[0].repr() == "FusedConv2d(1, 6, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2))");
}

TEST_CASE("fuse makes a max pool before a Flatten write NCHW, so that the flatten is a view") {
  Generator gen(5);
  nn::Sequential plain = nn::lenet5(), fused = nn::lenet5();
  fused.load_state_dict(plain.state_dict());
  nn::fuse(fused);
  const auto& first = fused.at<nn::MaxPool2d>(2);  // before a conv: the input's layout
  CHECK_FALSE(first.options().output_format.has_value());
  const auto& last = fused.at<nn::MaxPool2d>(5);
  REQUIRE(last.options().output_format.has_value());
  CHECK(*last.options().output_format == MemoryFormat::Contiguous);
  CHECK(last.repr() ==
        "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False, output_format=contiguous)");

  const Tensor features = randn({2, 16, 10, 10}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
  const Tensor pooled = fused[5](features);
  CHECK(pooled.is_contiguous());
  CHECK_CLOSE(pooled, plain[5](features), 0, 0);
  CHECK(fused[6](pooled).raw_data() == pooled.raw_data());  // the Flatten: a view

  plain.to(MemoryFormat::ChannelsLast);
  fused.to(MemoryFormat::ChannelsLast);
  const Tensor x = randn({2, 1, 28, 28}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
  CHECK_CLOSE(fused(x), plain(x), 1e-5, 1e-6);
}

TEST_CASE("fuse groups any activation rows after a Conv2d, Linear or BatchNorm2d, and nothing else") {
  nn::Sequential net(nn::Linear(4, 3), nn::Activation(ActivationKind::Relu), nn::Linear(3, 2),
                     nn::LeakyReLU(), nn::Tanh());
  nn::fuse(net);
  CHECK(net[0].repr() == "FusedLinear(in_features=4, out_features=3, bias=True)");
  CHECK(net[1].repr() == "Identity()");
  CHECK(net[2].repr() == "FusedLinear(in_features=3, out_features=2, bias=True)");
  CHECK(net[3].repr() == "Identity()");
  CHECK(net[4].repr() == "Identity()");
  CHECK(net.at<nn::FusedLinear>(2).block().str() == "linear -> bias -> leaky_relu(0.01) -> tanh");

  nn::Sequential mixed(nn::Conv2d(2, 4, 3), nn::BatchNorm2d(4), nn::Conv2d(4, 4, 1), nn::GELU(),
                       nn::SiLU(), nn::BatchNorm2d(4), nn::MaxPool2d(2), nn::BatchNorm2d(4), nn::ReLU(),
                       nn::Flatten(), nn::Linear(16, 2));
  nn::fuse(mixed);
  const std::vector<std::string> types = {"FusedConv2d", "FusedBatchNorm2d", "FusedConv2d", "Identity",
                                          "Identity", "BatchNorm2d", "MaxPool2d", "FusedBatchNorm2d",
                                          "Identity", "Flatten", "Linear"};
  for (size_t i = 0; i < types.size(); ++i) {
    CAPTURE(i);
    CHECK(mixed[i].type_name() == types[i]);
  }
  CHECK(mixed.at<nn::FusedConv2d>(0).block().str() == "conv2d(stride=1, padding=0) -> bias -> batch_norm");
  CHECK(mixed.at<nn::FusedConv2d>(2).block().str() == "conv2d(stride=1, padding=0) -> bias -> gelu -> silu");
  Generator gen(9);
  Tensor x = randn({2, 2, 6, 6}, {}, &gen);
  nn::Sequential reference = nn::Sequential(nn::Conv2d(2, 4, 3), nn::BatchNorm2d(4), nn::Conv2d(4, 4, 1),
                                            nn::GELU(), nn::SiLU(), nn::BatchNorm2d(4), nn::MaxPool2d(2),
                                            nn::BatchNorm2d(4), nn::ReLU(), nn::Flatten(), nn::Linear(16, 2));
  reference.load_state_dict(mixed.state_dict());
  CHECK_CLOSE(mixed(x), reference(x), 1e-5, 1e-6);
}

TEST_CASE("fuse keeps each module's mode") {
  nn::Sequential net = nn::mnist_net();
  net.eval();
  nn::fuse(net);
  CHECK_FALSE(net.is_training());
  CHECK_FALSE(net[1].is_training());
  CHECK_FALSE(net[2].is_training());
}

}  // namespace loom
