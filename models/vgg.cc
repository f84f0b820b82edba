// File: models/vgg.cc
// N batch; shapes in comments are per sample (C, H, W).
#include "models/vgg.h"

namespace loom::models {

namespace {

// torchvision's configurations "A" (VGG-11) and "D" (VGG-16), stage by stage.
const std::vector<std::vector<int64_t>> kVgg11 = {{64}, {128}, {256, 256}, {512, 512}, {512, 512}};
const std::vector<std::vector<int64_t>> kVgg16 = {
    {64, 64}, {128, 128}, {256, 256, 256}, {512, 512, 512}, {512, 512, 512}};

nn::Sequential features(const std::vector<std::vector<int64_t>>& stages) {
  nn::Sequential layers;
  int64_t in = 3;
  for (const std::vector<int64_t>& stage : stages) {
    for (int64_t channels : stage) {
      layers.push_back(nn::Conv2d(in, channels, 3, {.padding = 1}));
      layers.push_back(nn::BatchNorm2d(channels));
      layers.push_back(nn::ReLU());
      in = channels;
    }
    layers.push_back(nn::MaxPool2d(2, {.stride = 2}));
  }
  return layers;
}

}  // namespace

VGG::VGG(const std::vector<std::vector<int64_t>>& stages, VggOptions options) {
  features_ = register_module("features", features(stages));  // (512, H / 32, W / 32)
  const int64_t side = options.cifar ? 1 : 7, hidden = options.cifar ? 512 : 4096;
  avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(side));
  classifier_ = register_module(
      "classifier", nn::Sequential(nn::Linear(512 * side * side, hidden), nn::ReLU(), nn::Dropout(0.5),
                                   nn::Linear(hidden, hidden), nn::ReLU(), nn::Dropout(0.5),
                                   nn::Linear(hidden, options.num_classes)));
}

Tensor VGG::forward(const Tensor& x) {
  return (*classifier_)((*avgpool_)((*features_)(x)).flatten(1));
}

std::shared_ptr<VGG> vgg11_bn(VggOptions options) { return std::make_shared<VGG>(kVgg11, options); }
std::shared_ptr<VGG> vgg16_bn(VggOptions options) { return std::make_shared<VGG>(kVgg16, options); }

}  // namespace loom::models
