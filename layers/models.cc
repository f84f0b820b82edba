// File: layers/models.cc
// N batch; shapes in comments are per sample (C, H, W).
#include "layers/models.h"

#include <cstdint>

#include "layers/activation.h"
#include "layers/conv.h"
#include "layers/flatten.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/pooling.h"

namespace loom::nn {

namespace {

// 3x3 conv without bias (BN has one), BN, ReLU; keeps H and W.
Sequential conv_bn(int64_t in_channels, int64_t out_channels) {
  return Sequential(Conv2d(in_channels, out_channels, 3, {.padding = 1, .bias = false}),
                    BatchNorm2d(out_channels), ReLU());
}

Residual residual(int64_t channels) {
  return Residual(conv_bn(channels, channels), conv_bn(channels, channels));
}

}  // namespace

Sequential mnist_net() {
  return Sequential(Conv2d(1, 32, 3, {.padding = 1}), BatchNorm2d(32), ReLU(),
                    MaxPool2d(2),  // (32, 14, 14)
                    Conv2d(32, 64, 3, {.padding = 1}), BatchNorm2d(64), ReLU(),
                    MaxPool2d(2),  // (64, 7, 7)
                    Flatten(), Linear(64 * 7 * 7, 128), ReLU(), Linear(128, 10));
}

Sequential lenet5() {
  return Sequential(Conv2d(1, 6, 5, {.padding = 2}), ReLU(), MaxPool2d(2),  // (6, 14, 14)
                    Conv2d(6, 16, 5), ReLU(), MaxPool2d(2),                 // (16, 5, 5)
                    Flatten(), Linear(400, 120), ReLU(), Linear(120, 84), ReLU(), Linear(84, 10));
}

Sequential resnet9() {
  return Sequential(conv_bn(3, 64),                                     // (64, 32, 32)
                    conv_bn(64, 128), MaxPool2d(2), residual(128),      // (128, 16, 16)
                    conv_bn(128, 256), MaxPool2d(2),                    // (256, 8, 8)
                    conv_bn(256, 512), MaxPool2d(2), residual(512),     // (512, 4, 4)
                    AdaptiveMaxPool2d(1), Flatten(), Linear(512, 10));  // (10)
}

}  // namespace loom::nn
