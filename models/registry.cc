// File: models/registry.cc
// The rows. Each builds its model afresh from the default generator.
#include "models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "layers/models.h"
#include "models/mobilenet_v2.h"
#include "models/resnet.h"
#include "models/unet.h"
#include "models/vgg.h"
#include "models/vit.h"

namespace loom::models {

namespace {

const Shape kMnist = {1, 28, 28}, kCifar = {3, 32, 32}, kImagenet = {3, 224, 224}, kSegmentation = {3, 64, 64};

// A reference model of layers/models.h (its classes fixed at 10).
template <class Make>
std::function<std::shared_ptr<nn::Module>(int64_t)> reference(Make make) {
  return [make](int64_t num_classes) -> std::shared_ptr<nn::Module> {
    LOOM_CHECK(num_classes == 10, ValueError, "[models] the reference models have 10 classes, not {}",
               num_classes);
    return std::make_shared<nn::Sequential>(make());
  };
}

std::vector<ZooModel> rows() {
  return {
      {"lenet5", "LeNet-5 with ReLU and max pooling (nn::lenet5)", "mnist", kMnist, 10, false, reference(nn::lenet5)},
      {"mnist_net", "two conv-BN-ReLU-pool stages, two linears (nn::mnist_net)", "mnist", kMnist, 10, false,
       reference(nn::mnist_net)},
      {"resnet9", "the DAWNBench ResNet-9 (nn::resnet9)", "cifar10", kCifar, 10, false, reference(nn::resnet9)},
      {"resnet18", "torchvision's ResNet-18", "imagenet", kImagenet, 1000, false,
       [](int64_t k) { return resnet18({.num_classes = k}); }},
      {"resnet34", "torchvision's ResNet-34", "imagenet", kImagenet, 1000, false,
       [](int64_t k) { return resnet34({.num_classes = k}); }},
      {"resnet18_cifar", "torchvision's ResNet-18, CIFAR stem (3x3 conv1, no max pool)", "cifar10", kCifar, 10,
       false, [](int64_t k) { return resnet18({.num_classes = k, .cifar_stem = true}); }},
      {"resnet34_cifar", "torchvision's ResNet-34, CIFAR stem (3x3 conv1, no max pool)", "cifar10", kCifar, 10,
       false, [](int64_t k) { return resnet34({.num_classes = k, .cifar_stem = true}); }},
      {"resnet20", "He et al.'s CIFAR ResNet-20 (option-A shortcuts)", "cifar10", kCifar, 10, false,
       [](int64_t k) { return resnet20(k); }},
      {"resnet56", "He et al.'s CIFAR ResNet-56 (option-A shortcuts)", "cifar10", kCifar, 10, false,
       [](int64_t k) { return resnet56(k); }},
      {"vgg11_bn", "torchvision's VGG-11 with batch norm", "imagenet", kImagenet, 1000, false,
       [](int64_t k) { return vgg11_bn({.num_classes = k}); }},
      {"vgg16_bn", "torchvision's VGG-16 with batch norm", "imagenet", kImagenet, 1000, false,
       [](int64_t k) { return vgg16_bn({.num_classes = k}); }},
      {"vgg11_bn_cifar", "VGG-11-BN, 1x1 pool and 512-wide classifier for 32x32", "cifar10", kCifar, 10, false,
       [](int64_t k) { return vgg11_bn({.num_classes = k, .cifar = true}); }},
      {"vgg16_bn_cifar", "VGG-16-BN, 1x1 pool and 512-wide classifier for 32x32", "cifar10", kCifar, 10, false,
       [](int64_t k) { return vgg16_bn({.num_classes = k, .cifar = true}); }},
      {"mobilenet_v2", "torchvision's MobileNetV2", "imagenet", kImagenet, 1000, false,
       [](int64_t k) { return mobilenet_v2({.num_classes = k}); }},
      {"mobilenet_v2_cifar", "MobileNetV2, stem and second stage at stride 1 for 32x32", "cifar10", kCifar, 10,
       false, [](int64_t k) { return mobilenet_v2({.num_classes = k, .cifar = true}); }},
      {"unet", "a small U-Net (milesial's, width 16, ConvTranspose2d up-sampling)", "segmentation", kSegmentation,
       2, true, [](int64_t k) { return unet({.in_channels = 3, .num_classes = k}); }},
      {"vit_tiny", "a tiny ViT (torchvision's names): 7x7 patches, 4 layers of width 64, 4 heads", "mnist",
       kMnist, 10, false, [](int64_t k) { return vit({.num_classes = k}); }},
  };
}

}  // namespace

Shape ZooModel::batch_shape(int64_t batch) const {
  Shape s{batch};
  s.insert(s.end(), input.begin(), input.end());
  return s;
}

Shape ZooModel::target_shape(int64_t batch) const {
  return per_pixel ? Shape{batch, input[1], input[2]} : Shape{batch};
}

const std::vector<ZooModel>& zoo() {
  static const std::vector<ZooModel> all = rows();
  return all;
}

std::vector<std::string> zoo_names() {
  std::vector<std::string> names;
  for (const ZooModel& m : zoo()) names.push_back(m.name);
  return names;
}

std::string zoo_names_text() { return fmt::format("{}", fmt::join(zoo_names(), ", ")); }

const ZooModel& zoo_model(std::string_view name) {
  auto it = std::find_if(zoo().begin(), zoo().end(), [&](const ZooModel& m) { return m.name == name; });
  LOOM_CHECK(it != zoo().end(), ValueError, "[models] unknown model '{}' (the zoo has {})", name,
             zoo_names_text());
  return *it;
}

}  // namespace loom::models
