// File: models/resnet.cc
// N batch; shapes in comments are per sample (C, H, W).
#include "models/resnet.h"

#include <string>

#include "core/ops/ops.h"

namespace loom::models {

namespace {

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(in, out, 3, {.stride = stride, .padding = 1, .bias = false});
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t channels, int64_t stride) {
  conv1_ = register_module("conv1", conv3x3(in_channels, channels, stride));
  bn1_ = register_module("bn1", nn::BatchNorm2d(channels));
  relu_ = register_module("relu", nn::ReLU());
  conv2_ = register_module("conv2", conv3x3(channels, channels, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(channels));
  if (stride != 1 || in_channels != channels) {
    downsample_ = register_module(
        "downsample", nn::Sequential(nn::Conv2d(in_channels, channels, 1, {.stride = stride, .bias = false}),
                                     nn::BatchNorm2d(channels)));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*relu_)((*bn1_)((*conv1_)(x)));
  out = (*bn2_)((*conv2_)(out));
  return (*relu_)(add(out, downsample_ ? (*downsample_)(x) : x));
}

ResNet::ResNet(const std::vector<int64_t>& blocks, ResNetOptions options) {
  conv1_ = options.cifar_stem ? register_module("conv1", conv3x3(3, 64, 1))
                              : register_module("conv1", nn::Conv2d(3, 64, 7, {.stride = 2, .padding = 3, .bias = false}));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  relu_ = register_module("relu", nn::ReLU());
  if (options.cifar_stem) {
    maxpool_ = register_module("maxpool", nn::Identity());
  } else {
    maxpool_ = register_module("maxpool", nn::MaxPool2d(3, {.stride = 2, .padding = 1}));
  }
  int64_t in = 64;
  for (size_t stage = 0; stage < blocks.size(); ++stage) {
    const int64_t channels = 64 << stage, stride = stage == 0 ? 1 : 2;
    nn::Sequential layer;
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      layer.push_back(BasicBlock(in, channels, b == 0 ? stride : 1));
      in = channels;
    }
    layers_.push_back(register_module("layer" + std::to_string(stage + 1), std::move(layer)));
  }
  avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
  fc_ = register_module("fc", nn::Linear(in, options.num_classes));
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = (*maxpool_)((*relu_)((*bn1_)((*conv1_)(x))));  // (64, H / 4, W / 4); CIFAR stem (64, H, W)
  for (const auto& layer : layers_) h = (*layer)(h);         // (512, H / 32, W / 32); CIFAR (512, H / 8, W / 8)
  return (*fc_)((*avgpool_)(h).flatten(1));
}

std::shared_ptr<ResNet> resnet18(ResNetOptions options) {
  return std::make_shared<ResNet>(std::vector<int64_t>{2, 2, 2, 2}, options);
}

std::shared_ptr<ResNet> resnet34(ResNetOptions options) {
  return std::make_shared<ResNet>(std::vector<int64_t>{3, 4, 6, 3}, options);
}

CifarBasicBlock::CifarBasicBlock(int64_t in_channels, int64_t channels, int64_t stride)
    : in_channels_(in_channels), channels_(channels), stride_(stride) {
  conv1_ = register_module("conv1", conv3x3(in_channels, channels, stride));
  bn1_ = register_module("bn1", nn::BatchNorm2d(channels));
  conv2_ = register_module("conv2", conv3x3(channels, channels, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(channels));
}

// Option A: x[:, :, ::stride, ::stride] with (channels - in) / 2 zero channels on
// each side, as the twin's F.pad (one op of any batch size, which ONNX export keeps).
Tensor CifarBasicBlock::shortcut(const Tensor& x) const {
  if (stride_ == 1 && in_channels_ == channels_) return x;
  Tensor sub = x.slice(2, 0, x.size(2), stride_).slice(3, 0, x.size(3), stride_);
  const int64_t side = (channels_ - in_channels_) / 2;
  return pad(sub, {0, 0, 0, 0, side, side});
}

Tensor CifarBasicBlock::forward(const Tensor& x) {
  Tensor out = relu((*bn1_)((*conv1_)(x)));
  out = (*bn2_)((*conv2_)(out));
  return relu(add(out, shortcut(x)));
}

CifarResNet::CifarResNet(int64_t blocks_per_stage, int64_t num_classes) {
  conv1_ = register_module("conv1", conv3x3(3, 16, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(16));
  int64_t in = 16;
  for (int stage = 0; stage < 3; ++stage) {
    const int64_t channels = 16 << stage;
    nn::Sequential layer;
    for (int64_t b = 0; b < blocks_per_stage; ++b) {
      layer.push_back(CifarBasicBlock(in, channels, b == 0 && stage > 0 ? 2 : 1));
      in = channels;
    }
    layers_.push_back(register_module("layer" + std::to_string(stage + 1), std::move(layer)));
  }
  linear_ = register_module("linear", nn::Linear(64, num_classes));
}

Tensor CifarResNet::forward(const Tensor& x) {
  Tensor h = relu((*bn1_)((*conv1_)(x)));              // (16, 32, 32)
  for (const auto& layer : layers_) h = (*layer)(h);  // (64, 8, 8)
  return (*linear_)(global_avg_pool2d(h).flatten(1));
}

std::shared_ptr<CifarResNet> resnet20(int64_t num_classes) { return std::make_shared<CifarResNet>(3, num_classes); }
std::shared_ptr<CifarResNet> resnet56(int64_t num_classes) { return std::make_shared<CifarResNet>(9, num_classes); }

}  // namespace loom::models
