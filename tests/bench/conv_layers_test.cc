// File: tests/bench/conv_layers_test.cc
// bench/conv_layers: the convolutions it lists for a zoo model (each distinct call once, with its
// uses), its flags, its JSON line, and one layer timed on the CPU.
#include "bench/conv_layers.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "layers/nn.h"
#include "models/registry.h"
#include "tests/testing.h"

namespace loom::bench {
namespace {

// How many Conv2d modules the zoo model has: each runs once per forward in these models.
int64_t conv_modules(const std::string& model) {
  const models::ZooModel& row = models::zoo_model(model);
  int64_t n = 0;
  for (const auto& [name, module] : row.build(row.num_classes)->named_modules()) {
    n += std::dynamic_pointer_cast<nn::Conv2d>(module) != nullptr;
  }
  return n;
}

int64_t total_uses(const std::vector<ConvLayer>& layers) {
  return std::accumulate(layers.begin(), layers.end(), int64_t{0},
                         [](int64_t n, const ConvLayer& l) { return n + l.uses; });
}

TEST_CASE("every convolution of a model's forward, each distinct call once with its uses") {
  for (const char* model : {"resnet20", "mobilenet_v2_cifar", "vgg11_bn_cifar", "unet", "lenet5"}) {
    CAPTURE(model);
    const std::vector<ConvLayer> layers = model_convs(model, 16);
    REQUIRE_FALSE(layers.empty());
    CHECK(total_uses(layers) == conv_modules(model));
    for (const ConvLayer& l : layers) {
      CHECK(l.x[0] == 16);
      CHECK(l.x[1] == l.weight[1] * l.options.groups);
      CHECK_FALSE(l.module.empty());
    }
  }
  // resnet20: three stages of 3x3 convs that repeat, plus its stem and two projections.
  const std::vector<ConvLayer> resnet = model_convs("resnet20", 16);
  CHECK(static_cast<int64_t>(resnet.size()) < total_uses(resnet));
  CHECK(resnet.front().x == Shape{16, 3, 32, 32});
  CHECK(resnet.front().module == "conv1");
}

TEST_CASE("MobileNetV2's depthwise convolutions: seventeen uses, one filter plane per channel") {
  const std::vector<ConvLayer> layers = model_convs("mobilenet_v2_cifar", 8);
  int64_t depthwise = 0;
  for (const ConvLayer& l : layers) {
    if (!l.depthwise()) {
      CHECK(l.options.groups == 1);
      continue;
    }
    depthwise += l.uses;
    CHECK(l.weight == Shape{l.x[1], 1, 3, 3});
  }
  CHECK(depthwise == 17);
}

TEST_CASE("flags: defaults, values, and errors that name the flag") {
  auto parse = [](std::vector<std::string> args) {
    std::vector<char*> argv{const_cast<char*>("conv_layers")};
    for (std::string& a : args) argv.push_back(a.data());
    return parse_conv_layers_flags(static_cast<int>(argv.size()), argv.data());
  };
  const ConvLayersOptions d = parse({"--model", "resnet9"});
  CHECK(d.batch == 128);
  CHECK(d.precision == "tf32");
  CHECK(d.layout == "nhwc");
  CHECK_FALSE(d.depthwise);
  CHECK_FALSE(d.split);
  CHECK_FALSE(d.plans);
  CHECK(d.module.empty());
  const ConvLayersOptions o = parse({"--model", "unet", "--batch", "64", "--precision", "bf16", "--layout", "nchw",
                                     "--depthwise", "--replays", "7", "--repeats", "3", "--device", "cpu"});
  CHECK(o.batch == 64);
  CHECK(o.precision == "bf16");
  CHECK(o.layout == "nchw");
  CHECK(o.depthwise);
  CHECK(o.replays == 7);
  CHECK(o.repeats == 3);
  CHECK(o.device == Device::cpu());
  const ConvLayersOptions s = parse({"--model", "resnet9", "--split", "--plans", "--module", "layer1.0"});
  CHECK(s.split);
  CHECK(s.plans);
  CHECK(s.module == "layer1.0");
  CHECK_FALSE(s.depthwise);
  CHECK_THROWS_WITH_FRAGMENT(parse({"--model", "unet", "--batch", "x"}), ValueError, "--batch needs an integer");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--model", "unet", "--batch", "12x"}), ValueError, "got '12x'");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--batch", "8"}), ValueError, "--model is required");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--model", "unet", "--fast"}), ValueError, "unknown flag --fast");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--model", "unet", "--precision", "fp8"}), ValueError, "got 'fp8'");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--model", "unet", "--repeats", "0"}), ValueError,
                             "--repeats needs an integer >= 1, got 0");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--model"}), ValueError, "--model needs a value");
}

TEST_CASE("one layer timed on the CPU, and its JSON line") {
  const ConvLayersOptions o{.model = "mobilenet_v2_cifar", .batch = 2, .replays = 2, .repeats = 1};
  const ConvLayer layer = model_convs(o.model, o.batch).at(1);  // features.1's depthwise 3x3
  REQUIRE(layer.depthwise());
  const LayerTimes t = time_layer(layer, o);
  CHECK(std::isfinite(t.forward_ms));
  CHECK(t.forward_ms > 0);
  CHECK(std::isfinite(t.with_gradients_ms));
  CHECK(t.with_gradients_ms > 0);
  const std::string line = to_json(layer, {.forward_ms = 0.25, .with_gradients_ms = 0.75}, o);
  for (const char* field : {"\"kind\": \"conv\"", "\"model\": \"mobilenet_v2_cifar\"", "\"x\": [2, 32, 32, 32]",
                            "\"weight\": [32, 1, 3, 3]", "\"groups\": 32", "\"uses\": 1", "\"stride\": [1, 1]",
                            "\"forward_ms\": 0.25", "\"with_gradients_ms\": 0.75", "\"device\": \"cpu\""}) {
    CHECK_MESSAGE(line.find(field) != std::string::npos, field << " in " << line);
  }
}

TEST_CASE("--split times each gradient alone; --module keeps one layer and names the others when it is wrong") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = (std::filesystem::path(tmp != nullptr ? tmp : "/tmp") / "conv_layers_split.jsonl").string();
  std::filesystem::remove(path);
  const std::vector<ConvLayer> all = model_convs("lenet5", 2);
  REQUIRE(all.size() >= 2);
  ConvLayersOptions o{.model = "lenet5", .batch = 2, .module = all[1].module, .split = true, .replays = 1,
                      .repeats = 1, .json = path};
  run_conv_layers(o);
  std::ifstream in(path);
  std::string line, extra;
  REQUIRE(std::getline(in, line));
  CHECK_FALSE(std::getline(in, extra));  // one layer: the module's
  for (const std::string& field : {"\"module\": \"" + all[1].module + "\"", std::string("\"dgrad_ms\": "),
                                  std::string("\"wgrad_ms\": ")}) {
    CHECK_MESSAGE(line.find(field) != std::string::npos, field << " in " << line);
  }
  const LayerTimes t = time_layer(all[0], o);
  REQUIRE(t.dgrad_ms.has_value());
  REQUIRE(t.wgrad_ms.has_value());
  CHECK(*t.dgrad_ms > 0);
  CHECK(*t.wgrad_ms > 0);
  o.split = false;
  CHECK(to_json(all[0], {.forward_ms = 1, .with_gradients_ms = 2}, o).find("dgrad_ms") == std::string::npos);
  o.module = "fc1";
  CHECK_THROWS_WITH_FRAGMENT(run_conv_layers(o), ValueError, "--module fc1: no distinct convolution of lenet5");
  CHECK_THROWS_WITH_FRAGMENT(run_conv_layers(o), ValueError, all[0].module);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace loom::bench
