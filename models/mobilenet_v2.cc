// File: models/mobilenet_v2.cc
// N batch; shapes in comments are per sample (C, H, W).
#include "models/mobilenet_v2.h"

#include <array>

#include "core/ops/ops.h"

namespace loom::models {

namespace {

// torchvision's inverted_residual_setting: expansion t, channels c, blocks n, first stride s.
struct Stage {
  int64_t t, c, n, s;
};
constexpr std::array<Stage, 7> kStages = {
    {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}}};
constexpr int64_t kStemChannels = 32, kLastChannels = 1280;

}  // namespace

nn::Sequential conv_bn_relu6(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                             int64_t groups) {
  return nn::Sequential(nn::Conv2d(in_channels, out_channels, kernel_size,
                                   {.stride = stride, .padding = (kernel_size - 1) / 2, .groups = groups, .bias = false}),
                        nn::BatchNorm2d(out_channels), nn::ReLU6());
}

InvertedResidual::InvertedResidual(int64_t in_channels, int64_t out_channels, int64_t stride, int64_t expand_ratio)
    : residual_(stride == 1 && in_channels == out_channels) {
  const int64_t hidden = in_channels * expand_ratio;
  nn::Sequential layers;
  if (expand_ratio != 1) layers.push_back(conv_bn_relu6(in_channels, hidden, 1));
  layers.push_back(conv_bn_relu6(hidden, hidden, 3, stride, hidden));  // depthwise
  layers.push_back(nn::Conv2d(hidden, out_channels, 1, {.bias = false}));
  layers.push_back(nn::BatchNorm2d(out_channels));
  conv_ = register_module("conv", std::move(layers));
}

Tensor InvertedResidual::forward(const Tensor& x) {
  return residual_ ? add(x, (*conv_)(x)) : (*conv_)(x);
}

MobileNetV2::MobileNetV2(MobileNetV2Options options) {
  nn::Sequential features;
  features.push_back(conv_bn_relu6(3, kStemChannels, 3, options.cifar ? 1 : 2));  // (32, H / 2, W / 2)
  int64_t in = kStemChannels;
  for (size_t i = 0; i < kStages.size(); ++i) {
    const Stage& st = kStages[i];
    const int64_t first_stride = options.cifar && i == 1 ? 1 : st.s;
    for (int64_t b = 0; b < st.n; ++b) {
      features.push_back(InvertedResidual(in, st.c, b == 0 ? first_stride : 1, st.t));
      in = st.c;
    }
  }
  features.push_back(conv_bn_relu6(in, kLastChannels, 1));  // (1280, H / 32, W / 32); CIFAR (1280, H / 8, W / 8)
  features_ = register_module("features", std::move(features));
  classifier_ = register_module(
      "classifier", nn::Sequential(nn::Dropout(options.dropout), nn::Linear(kLastChannels, options.num_classes)));
}

Tensor MobileNetV2::forward(const Tensor& x) {
  return (*classifier_)(global_avg_pool2d((*features_)(x)).flatten(1));
}

std::shared_ptr<MobileNetV2> mobilenet_v2(MobileNetV2Options options) {
  return std::make_shared<MobileNetV2>(options);
}

}  // namespace loom::models
