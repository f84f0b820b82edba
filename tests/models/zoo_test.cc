// File: tests/models/zoo_test.cc
// Every model of the zoo's registry against its PyTorch twin
// (models/torch_models.py, through the golden list tools/zoo_golden.py wrote):
// the same state_dict names in the same order with the same shapes, the same
// parameter count (torchvision's published counts for its architectures), the
// registry's input and classes; the output shape of a forward at a small
// input (no full-size ImageNet forward on the CPU); an empty batch through a
// training step, traced or not; the custom modules' structure; and the
// registry's errors.
// N batch, C channels, H, W.
#include "models/registry.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/fusion_trace.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "models/mobilenet_v2.h"
#include "models/resnet.h"
#include "models/unet.h"
#include "models/vit.h"
#include "tests/models/zoo_inputs.h"
#include "tests/testing.h"

namespace loom {
namespace {

using testing::small_input;

// One model of the golden file: its header fields and state_dict entries "name shape".
struct Golden {
  std::string input;  // "3,32,32"
  int64_t classes = 0, parameters = 0;
  std::vector<std::string> entries;  // "conv1.weight 64,3,7,7"
};

std::map<std::string, Golden> read_golden() {
  std::ifstream in("tests/models/testdata/zoo_state_dicts.txt");
  REQUIRE_MESSAGE(in.good(), "tests/models/testdata/zoo_state_dicts.txt is not in the runfiles");
  std::map<std::string, Golden> out;
  Golden* current = nullptr;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "model") {
      std::string name, key;
      words >> name;
      current = &out[name];
      words >> key >> current->input >> key >> current->classes >> key >> current->parameters;
    } else {
      REQUIRE(current != nullptr);
      current->entries.push_back(line);
    }
  }
  return out;
}

std::string joined(const Shape& s) {
  std::string text;
  for (size_t i = 0; i < s.size(); ++i) text += (i ? "," : "") + std::to_string(s[i]);
  return text;
}

std::vector<std::string> entries_of(const nn::Module& net) {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : net.state_dict()) out.push_back(name + " " + joined(tensor.sizes()));
  return out;
}

// An empty batch (the tail of a batch split over more GPUs than it has samples)
// through a training step, as written in NCHW and traced in channels-last (as
// TrainStep runs it): an empty output, every parameter's gradient zero, the
// floating-point buffers (the norms' running statistics) as they were.
void check_empty_batch(nn::Module& net, const models::ZooModel& row) {
  net.train();
  std::vector<Tensor> buffers_before;
  for (const auto& [name, b] : net.named_buffers()) buffers_before.push_back(b.clone());
  fusion::Traced traced([&net](const Tensor& x) { return net(x); });
  for (const bool trace : {false, true}) {
    CAPTURE(trace);
    net.zero_grad();
    const MemoryFormat format = trace ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    const Tensor x = zeros(small_input(row, 0)).contiguous(format);
    const Tensor y = trace ? traced(x) : net(x);
    CHECK(y.size(0) == 0);
    sum(y).backward();
    for (const auto& [name, p] : net.named_parameters()) {
      CAPTURE(name);
      REQUIRE(p.grad().defined());
      CHECK(max(abs(p.grad())).item() == 0);
    }
  }
  size_t i = 0;
  for (const auto& [name, b] : net.named_buffers()) {
    CAPTURE(name);
    if (is_floating(b.dtype())) CHECK_CLOSE(b, buffers_before[i], 0, 0);
    ++i;
  }
}

// Each model is built once (the ImageNet VGGs hold 133M and 138M parameters):
// its state_dict against the twin's, an eval-mode forward at a small input, then
// an empty batch in training.
TEST_CASE("every registry row: the twin's state_dict names, shapes, order and parameters; output shape; empty batch") {
  const std::map<std::string, Golden> golden = read_golden();
  CHECK(golden.size() == models::zoo().size());
  Generator gen(3);
  for (const models::ZooModel& row : models::zoo()) {
    CAPTURE(row.name);
    auto it = golden.find(row.name);
    REQUIRE_MESSAGE(it != golden.end(), "no twin in models/torch_models.py (then run tools/zoo_golden.py)");
    const Golden& g = it->second;
    CHECK(joined(row.input) == g.input);
    CHECK(row.num_classes == g.classes);
    manual_seed(0);
    std::shared_ptr<nn::Module> net = row.build(row.num_classes);
    CHECK(net->num_parameters() == g.parameters);
    const std::vector<std::string> mine = entries_of(*net);
    CHECK(mine.size() == g.entries.size());
    for (size_t i = 0; i < std::min(mine.size(), g.entries.size()); ++i) {
      if (mine[i] != g.entries[i]) {
        FAIL_CHECK("entry " << i << ": Loom has '" << mine[i] << "', the twin '" << g.entries[i] << "'");
        break;
      }
    }
    {
      net->eval();
      NoGradGuard no_grad;
      const Shape in = small_input(row, 2);
      Tensor y = (*net)(randn(in, {}, &gen));
      const Shape expected = row.per_pixel ? Shape{2, row.num_classes, in[2], in[3]} : Shape{2, row.num_classes};
      CHECK(y.sizes() == expected);
      CHECK(std::isfinite(y.sum().item()));
    }
    check_empty_batch(*net, row);
  }
}

TEST_CASE("the twins have torchvision's published parameter counts, and He et al.'s") {
  // torchvision's model documentation (1000 classes); the golden counts are the
  // twins', which the test above holds Loom's models to.
  const std::map<std::string, Golden> golden = read_golden();
  const std::map<std::string, int64_t> counts = {{"resnet18", 11'689'512}, {"resnet34", 21'797'672},
                                                 {"vgg11_bn", 132'868'840}, {"vgg16_bn", 138'365'992},
                                                 {"mobilenet_v2", 3'504'872}};
  for (const auto& [name, count] : counts) {
    CAPTURE(name);
    CHECK(golden.at(name).parameters == count);
  }
  // The CIFAR ResNets: 0.27M and 0.85M.
  CHECK(golden.at("resnet20").parameters == 269'722);
  CHECK(golden.at("resnet56").parameters == 853'018);
}

TEST_CASE("the registry's builders take the number of classes") {
  for (const char* name : {"resnet18_cifar", "resnet20", "vgg11_bn_cifar", "mobilenet_v2_cifar", "unet", "vit_tiny"}) {
    CAPTURE(name);
    const StateDict s = models::zoo_model(name).build(7)->state_dict();
    CHECK(s.back().second.size(0) == 7);  // the classifier's bias
  }
}

TEST_CASE("a training step through a zoo model gives every parameter a gradient (resnet20, unet, vit_tiny)") {
  Generator gen(4);
  for (const char* name : {"resnet20", "unet", "vit_tiny"}) {
    CAPTURE(name);
    const models::ZooModel& row = models::zoo_model(name);
    manual_seed(2);
    std::shared_ptr<nn::Module> net = row.build(row.num_classes);
    const Shape in = small_input(row, 2);
    Tensor target = row.per_pixel ? randint(0, row.num_classes, {2, in[2], in[3]}, {.dtype = DType::Int64}, &gen)
                                  : randint(0, row.num_classes, {2}, {.dtype = DType::Int64}, &gen);
    cross_entropy((*net)(randn(in, {}, &gen)), target).backward();
    for (const auto& [pname, p] : net->named_parameters()) {
      CAPTURE(pname);
      REQUIRE(p.grad().defined());
      CHECK(std::isfinite(mul(p.grad(), p.grad()).sum().item()));
    }
  }
}

// The type of the descendant at `path` ("layer1.0"), "(none)" when there is none.
std::string type_at(const nn::Module& net, const std::string& path) {
  for (const auto& [name, m] : net.named_modules()) {
    if (name == path) return m->type_name();
  }
  return "(none)";
}

TEST_CASE("zoo models are custom modules with torchvision's structure") {
  auto resnet = models::resnet18({.num_classes = 10, .cifar_stem = true});
  CHECK(resnet->type_name() == "ResNet");
  CHECK(type_at(*resnet, "layer1.0") == "BasicBlock");
  CHECK(type_at(*resnet, "layer2.0.downsample.0") == "Conv2d");  // the projection shortcut
  CHECK(type_at(*resnet, "layer1.0.downsample") == "(none)");     // identity where the shape stays
  CHECK(type_at(*resnet, "maxpool") == "Identity");               // the CIFAR stem
  CHECK(type_at(*models::resnet20(), "layer2.0") == "CifarBasicBlock");
  auto mobilenet = models::mobilenet_v2({.num_classes = 10, .cifar = true});
  CHECK(type_at(*mobilenet, "features.1") == "InvertedResidual");
  CHECK(type_at(*mobilenet, "features.2.conv.0.2") == "ReLU6");  // MobileNetV2's activation is a ReLU6 row
  CHECK(type_at(*mobilenet, "features.2.conv.1.0") == "Conv2d");
  auto unet = models::unet();
  CHECK(type_at(*unet, "up1") == "Up");
  CHECK(type_at(*unet, "up1.up") == "ConvTranspose2d");
  CHECK(type_at(*unet, "down1") == "Down");
  auto vit = models::vit();
  CHECK(type_at(*vit, "encoder.layers.encoder_layer_0") == "EncoderBlock");
  CHECK(type_at(*vit, "encoder.layers.encoder_layer_0.self_attention") == "MultiheadAttention");
}

TEST_CASE("the registry names every model in its errors; U-Net and ViT name bad input sizes") {
  CHECK_THROWS_WITH_FRAGMENT(models::zoo_model("resnet19"), ValueError,
                             "[models] unknown model 'resnet19' (the zoo has lenet5, mnist_net, resnet9, resnet18");
  CHECK(models::zoo_names().size() == models::zoo().size());
  CHECK_THROWS_WITH_FRAGMENT(models::zoo_model("mnist_net").build(5), ValueError, "have 10 classes, not 5");
  auto unet = models::unet();
  CHECK_THROWS_WITH_FRAGMENT((*unet)(randn({2, 3, 24, 24})), ShapeError, "multiples of 16");
  auto vit = models::vit();
  CHECK_THROWS_WITH_FRAGMENT((*vit)(randn({1, 1, 32, 32})), ShapeError,
                             "[VisionTransformer] expects (N, 1, 28, 28) images, got (1, 1, 32, 32)");
  CHECK_THROWS_WITH_FRAGMENT(models::vit({.image_size = 30}), ValueError, "multiple of patch_size 7");
}

}  // namespace
}  // namespace loom
