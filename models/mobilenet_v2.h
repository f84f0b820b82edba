// File: models/mobilenet_v2.h
// torchvision's MobileNetV2, written as torchvision writes it: `features` (a
// conv-BN-ReLU6 stem, 17 InvertedResidual blocks, a 1x1 conv-BN-ReLU6 to 1280
// channels), a global average pool, `classifier` (Dropout(0.2), Linear);
// 3,504,872 parameters at 1000 classes, torchvision's names. The CIFAR
// variant (kuangliu's pytorch-cifar) keeps the names and strides the stem and
// the second stage by 1 instead of 2, for 32x32 images. The twin is in
// models/torch_models.py.
//
//   auto net = models::mobilenet_v2({.num_classes = 10, .cifar = true});  // (N, 3, 32, 32) -> (N, 10)
//
// N batch, C channels, H, W.
#pragma once

#include <cstdint>
#include <memory>

#include "layers/nn.h"

namespace loom::models {

// conv (k x k, stride, padding (k - 1) / 2, no bias) -> BN -> ReLU6, as torchvision's
// Conv2dNormActivation (children "0", "1", "2"); groups = channels is a depthwise conv.
nn::Sequential conv_bn_relu6(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
                             int64_t groups = 1);

// Expand (1x1, unless the ratio is 1), depthwise 3x3 with the stride, project
// (1x1 conv + BN, no activation), all in the child "conv"; x + conv(x) where
// the stride is 1 and the widths match.
class InvertedResidual : public nn::Module {
 public:
  InvertedResidual(int64_t in_channels, int64_t out_channels, int64_t stride, int64_t expand_ratio);
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, out, H / stride, W / stride)

 private:
  bool residual_;
  std::shared_ptr<nn::Sequential> conv_;
};

struct MobileNetV2Options {
  int64_t num_classes = 1000;
  bool cifar = false;   // stem and second stage at stride 1, for 32x32 images
  double dropout = 0.2;
};

class MobileNetV2 : public nn::Module {
 public:
  explicit MobileNetV2(MobileNetV2Options options = {});
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, num_classes)

 private:
  std::shared_ptr<nn::Sequential> features_;
  std::shared_ptr<nn::Sequential> classifier_;
};

std::shared_ptr<MobileNetV2> mobilenet_v2(MobileNetV2Options options = {});

}  // namespace loom::models
