// File: tests/layers/models_test.cc
// The reference models against torch_ref.py: every state_dict key, in
// PyTorch's order, with its shape and dtype; parameter counts worked out by
// hand from the layer sizes; output shapes; mnist_net's print.
// N batch, C channels, K out channels, R, S filter.
#include "layers/models.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct Key {
  std::string name;
  Shape shape;
};

// PyTorch's BatchNorm2d(C) entries under `prefix`.
std::vector<Key> bn_keys(const std::string& prefix, int64_t c) {
  return {{prefix + ".weight", {c}},
          {prefix + ".bias", {c}},
          {prefix + ".running_mean", {c}},
          {prefix + ".running_var", {c}},
          {prefix + ".num_batches_tracked", {}}};
}

// torch_ref.py's conv_bn(ci, co) under `prefix`: "prefix.0" conv without bias, "prefix.1" BN.
std::vector<Key> conv_bn_keys(const std::string& prefix, int64_t ci, int64_t co) {
  std::vector<Key> keys = {{prefix + ".0.weight", {co, ci, 3, 3}}};
  for (const Key& k : bn_keys(prefix + ".1", co)) keys.push_back(k);
  return keys;
}

void append(std::vector<Key>& keys, const std::vector<Key>& more) {
  keys.insert(keys.end(), more.begin(), more.end());
}

void check_state(const nn::Module& model, const std::vector<Key>& expected) {
  const StateDict state = model.state_dict();
  REQUIRE(state.size() == expected.size());
  for (size_t i = 0; i < state.size(); ++i) {
    CAPTURE(expected[i].name);
    CHECK(state[i].first == expected[i].name);
    CHECK(shape_str(state[i].second.sizes()) == shape_str(expected[i].shape));
    const bool counter = expected[i].name.ends_with("num_batches_tracked");
    CHECK(state[i].second.dtype() == (counter ? DType::Int64 : DType::Float32));
  }
}

TEST_CASE("mnist_net: PyTorch's state_dict keys and 421,834 parameters") {
  // torch_ref.py: 0 Conv2d(1, 32, 3, padding=1), 1 BN(32), 2 ReLU, 3 MaxPool,
  // 4 Conv2d(32, 64, 3, padding=1), 5 BN(64), 6 ReLU, 7 MaxPool, 8 Flatten,
  // 9 Linear(3136, 128), 10 ReLU, 11 Linear(128, 10).
  std::vector<Key> expected = {{"0.weight", {32, 1, 3, 3}}, {"0.bias", {32}}};
  append(expected, bn_keys("1", 32));
  append(expected, {{"4.weight", {64, 32, 3, 3}}, {"4.bias", {64}}});
  append(expected, bn_keys("5", 64));
  append(
      expected,
      {{"9.weight", {128, 3136}}, {"9.bias", {128}}, {"11.weight", {10, 128}}, {"11.bias", {10}}});
  nn::Sequential net = nn::mnist_net();
  check_state(net, expected);
  // conv 32*1*9 + 32, BN 2*32, conv 64*32*9 + 64, BN 2*64, fc 3136*128 + 128, fc 128*10 + 10
  const int64_t by_hand = 320 + 64 + 18496 + 128 + 401536 + 1290;
  CHECK(by_hand == 421834);
  CHECK(net.num_parameters() == by_hand);
  CHECK(net.named_parameters().size() == 12);  // weight and bias of 2 convs, 2 BNs, 2 linears
}

TEST_CASE("lenet5: PyTorch's state_dict keys and 61,706 parameters") {
  // 0 Conv2d(1, 6, 5, padding=2), 1 ReLU, 2 MaxPool, 3 Conv2d(6, 16, 5), 4 ReLU, 5 MaxPool,
  // 6 Flatten, 7 Linear(400, 120), 8 ReLU, 9 Linear(120, 84), 10 ReLU, 11 Linear(84, 10).
  const std::vector<Key> expected = {
      {"0.weight", {6, 1, 5, 5}}, {"0.bias", {6}},   {"3.weight", {16, 6, 5, 5}}, {"3.bias", {16}},
      {"7.weight", {120, 400}},   {"7.bias", {120}}, {"9.weight", {84, 120}},     {"9.bias", {84}},
      {"11.weight", {10, 84}},    {"11.bias", {10}}};
  nn::Sequential net = nn::lenet5();
  check_state(net, expected);
  const int64_t by_hand =
      (6 * 25 + 6) + (16 * 6 * 25 + 16) + (400 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10);
  CHECK(by_hand == 61706);
  CHECK(net.num_parameters() == by_hand);
}

TEST_CASE("resnet9: PyTorch's state_dict keys (Residual children a and b) and parameter count") {
  // 0 conv_bn(3, 64), 1 conv_bn(64, 128), 2 MaxPool, 3 Residual(128), 4 conv_bn(128, 256),
  // 5 MaxPool, 6 conv_bn(256, 512), 7 MaxPool, 8 Residual(512), 9 AdaptiveMaxPool2d,
  // 10 Flatten, 11 Linear(512, 10).
  std::vector<Key> expected;
  append(expected, conv_bn_keys("0", 3, 64));
  append(expected, conv_bn_keys("1", 64, 128));
  append(expected, conv_bn_keys("3.a", 128, 128));
  append(expected, conv_bn_keys("3.b", 128, 128));
  append(expected, conv_bn_keys("4", 128, 256));
  append(expected, conv_bn_keys("6", 256, 512));
  append(expected, conv_bn_keys("8.a", 512, 512));
  append(expected, conv_bn_keys("8.b", 512, 512));
  append(expected, {{"11.weight", {10, 512}}, {"11.bias", {10}}});
  nn::Sequential net = nn::resnet9();
  check_state(net, expected);
  auto conv_bn = [](int64_t ci, int64_t co) { return ci * co * 9 + 2 * co; };
  const int64_t by_hand = conv_bn(3, 64) + conv_bn(64, 128) + 2 * conv_bn(128, 128) +
                          conv_bn(128, 256) + conv_bn(256, 512) + 2 * conv_bn(512, 512) +
                          (512 * 10 + 10);
  CHECK(by_hand == 6573130);
  CHECK(net.num_parameters() == by_hand);
}

TEST_CASE("the models map their input images to 10 logits") {
  Generator gen(11);
  CHECK(shape_str(nn::mnist_net()(randn({2, 1, 28, 28}, {}, &gen)).sizes()) == "(2, 10)");
  CHECK(shape_str(nn::lenet5()(randn({2, 1, 28, 28}, {}, &gen)).sizes()) == "(2, 10)");
  nn::Sequential resnet = nn::resnet9();
  resnet.eval();  // running statistics: one image is enough
  CHECK(shape_str(resnet(randn({1, 3, 32, 32}, {}, &gen)).sizes()) == "(1, 10)");
}

TEST_CASE("mnist_net prints as PyTorch prints it, plus the parameter count") {
  const std::string expected =
      "Sequential(\n"
      "  (0): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
      "  (1): BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
      "  (2): ReLU()\n"
      "  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
      "  (4): Conv2d(32, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
      "  (5): BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
      "  (6): ReLU()\n"
      "  (7): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
      "  (8): Flatten(start_dim=1, end_dim=-1)\n"
      "  (9): Linear(in_features=3136, out_features=128, bias=True)\n"
      "  (10): ReLU()\n"
      "  (11): Linear(in_features=128, out_features=10, bias=True)\n"
      ")\n"
      "Total parameters: 421,834";
  CHECK(nn::mnist_net().str() == expected);
}

TEST_CASE("resnet9 prints its residual blocks nested") {
  const std::string printed = nn::resnet9().repr();
  const std::string block =
      "  (3): Residual(\n"
      "    (a): Sequential(\n"
      "      (0): Conv2d(128, 128, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), "
      "bias=False)\n"
      "      (1): BatchNorm2d(128, eps=1e-05, momentum=0.1, affine=True, "
      "track_running_stats=True)\n"
      "      (2): ReLU()\n"
      "    )\n";
  CHECK_MESSAGE(printed.find(block) != std::string::npos, printed);
  CHECK(printed.find("  (9): AdaptiveMaxPool2d(output_size=1)\n") != std::string::npos);
}

}  // namespace
}  // namespace loom
