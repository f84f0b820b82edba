// File: models/vgg.h
// torchvision's VGG with batch norm, layer for layer: `features` (3x3 conv with
// bias, BN, ReLU, and 2x2 max pools), `avgpool`, `classifier` (Linear, ReLU,
// Dropout(0.5), Linear, ReLU, Dropout(0.5), Linear), so state_dict names and
// shapes are torchvision's (vgg11_bn: 132,868,840 parameters at 1000
// classes). The CIFAR variant keeps the names and pools to 1x1 with a 512-wide
// classifier (still with its dropout), for 32x32 images. The twins are in
// models/torch_models.py.
//
//   auto net = models::vgg11_bn({.num_classes = 10, .cifar = true});  // (N, 3, 32, 32) -> (N, 10)
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "layers/nn.h"

namespace loom::models {

struct VggOptions {
  int64_t num_classes = 1000;
  bool cifar = false;  // avgpool to 1x1 and a 512-wide classifier, for 32x32 images
};

class VGG : public nn::Module {
 public:
  // `stages`: the output channels of each stage's convs; a 2x2 max pool ends each stage.
  VGG(const std::vector<std::vector<int64_t>>& stages, VggOptions options);
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, num_classes)

 private:
  std::shared_ptr<nn::Sequential> features_;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<nn::Sequential> classifier_;
};

std::shared_ptr<VGG> vgg11_bn(VggOptions options = {});
std::shared_ptr<VGG> vgg16_bn(VggOptions options = {});

}  // namespace loom::models
