// File: models/resnet.h
// ResNets written as a user writes them: torchvision's ResNet-18/34 (its
// BasicBlock, parameter names and counts: resnet18 has 11,689,512 parameters
// at 1000 classes) with the ImageNet stem or the CIFAR stem (a 3x3 stride-1
// conv1 and no max pool, as CIFAR adaptations of torchvision's model set
// conv1 and maxpool = Identity), and He et al.'s CIFAR ResNet-20/56 (three
// stages of 16, 32, 64 channels, the parameter-free option-A shortcut: a
// strided slice and zero channels; the names of akamaster's
// pytorch_resnet_cifar10). The PyTorch twins are in models/torch_models.py.
//
//   auto net = models::resnet18({.num_classes = 10, .cifar_stem = true});  // (N, 3, 32, 32) -> (N, 10)
//
// N batch, C channels, H, W.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "layers/nn.h"

namespace loom::models {

// torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)),
// the shortcut a 1x1 conv + BN ("downsample") where the stride or the width changes.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t channels, int64_t stride);
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, channels, H / stride, W / stride)

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::ReLU> relu_;
  std::shared_ptr<nn::Sequential> downsample_;  // null: the identity
};

struct ResNetOptions {
  int64_t num_classes = 1000;
  bool cifar_stem = false;  // conv1 3x3 stride 1 and no max pool, for 32x32 images
};

// torchvision's ResNet with BasicBlocks: conv1, bn1, relu, maxpool, layer1..4,
// avgpool, fc. `blocks` per stage: {2, 2, 2, 2} is ResNet-18.
class ResNet : public nn::Module {
 public:
  ResNet(const std::vector<int64_t>& blocks, ResNetOptions options);
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, num_classes)

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::ReLU> relu_;
  std::shared_ptr<nn::Module> maxpool_;  // MaxPool2d, or Identity under the CIFAR stem
  std::vector<std::shared_ptr<nn::Sequential>> layers_;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<nn::Linear> fc_;
};

std::shared_ptr<ResNet> resnet18(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet34(ResNetOptions options = {});

// He et al.'s CIFAR block: as BasicBlock, but where the shape changes the
// shortcut takes every other pixel and pads the channels with zeros (option A:
// no parameters).
class CifarBasicBlock : public nn::Module {
 public:
  CifarBasicBlock(int64_t in_channels, int64_t channels, int64_t stride);
  Tensor forward(const Tensor& x) override;

 private:
  Tensor shortcut(const Tensor& x) const;

  int64_t in_channels_, channels_, stride_;
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
};

// conv1 (3 -> 16), bn1, layer1..3 of `blocks_per_stage` blocks each, global
// average pool, linear (64 -> num_classes). 3 blocks: ResNet-20; 9: ResNet-56.
class CifarResNet : public nn::Module {
 public:
  CifarResNet(int64_t blocks_per_stage, int64_t num_classes);
  Tensor forward(const Tensor& x) override;  // (N, 3, 32, 32) -> (N, num_classes)

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<nn::Sequential>> layers_;
  std::shared_ptr<nn::Linear> linear_;
};

std::shared_ptr<CifarResNet> resnet20(int64_t num_classes = 10);  // 269,722 parameters
std::shared_ptr<CifarResNet> resnet56(int64_t num_classes = 10);  // 853,018 parameters

}  // namespace loom::models
