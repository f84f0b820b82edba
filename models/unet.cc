// File: models/unet.cc
// N batch; shapes in comments are per sample (C, H, W), w the width.
#include "models/unet.h"

#include "core/error.h"
#include "core/ops/ops.h"

namespace loom::models {

DoubleConv::DoubleConv(int64_t in_channels, int64_t out_channels) {
  double_conv_ = register_module(
      "double_conv", nn::Sequential(nn::Conv2d(in_channels, out_channels, 3, {.padding = 1, .bias = false}),
                                    nn::BatchNorm2d(out_channels), nn::ReLU(),
                                    nn::Conv2d(out_channels, out_channels, 3, {.padding = 1, .bias = false}),
                                    nn::BatchNorm2d(out_channels), nn::ReLU()));
}

Tensor DoubleConv::forward(const Tensor& x) { return (*double_conv_)(x); }

Down::Down(int64_t in_channels, int64_t out_channels) {
  maxpool_conv_ =
      register_module("maxpool_conv", nn::Sequential(nn::MaxPool2d(2), DoubleConv(in_channels, out_channels)));
}

Tensor Down::forward(const Tensor& x) { return (*maxpool_conv_)(x); }

Up::Up(int64_t in_channels, int64_t out_channels) {
  up_ = register_module("up", nn::ConvTranspose2d(in_channels, in_channels / 2, 2, {.stride = 2}));
  conv_ = register_module("conv", DoubleConv(in_channels, out_channels));
}

Tensor Up::forward(const Tensor& x, const Tensor& skip) {
  Tensor up = (*up_)(x);
  LOOM_CHECK(up.size(2) == skip.size(2) && up.size(3) == skip.size(3), ShapeError,
             "[UNet Up] the skip connection is {}x{} but the up-sampled input is {}x{}; give the U-Net "
             "an input whose height and width are multiples of 16",
             skip.size(2), skip.size(3), up.size(2), up.size(3));
  // One dtype for cat: under bf16 autocast the transposed conv gives bf16, the skip may not.
  return (*conv_)(cat({skip, up.to(skip.dtype())}, 1));
}

OutConv::OutConv(int64_t in_channels, int64_t out_channels) {
  conv_ = register_module("conv", nn::Conv2d(in_channels, out_channels, 1));
}

Tensor OutConv::forward(const Tensor& x) { return (*conv_)(x); }

UNet::UNet(UNetOptions options) {
  const int64_t w = options.width;
  inc_ = register_module("inc", DoubleConv(options.in_channels, w));
  down1_ = register_module("down1", Down(w, 2 * w));
  down2_ = register_module("down2", Down(2 * w, 4 * w));
  down3_ = register_module("down3", Down(4 * w, 8 * w));
  down4_ = register_module("down4", Down(8 * w, 16 * w));
  up1_ = register_module("up1", Up(16 * w, 8 * w));
  up2_ = register_module("up2", Up(8 * w, 4 * w));
  up3_ = register_module("up3", Up(4 * w, 2 * w));
  up4_ = register_module("up4", Up(2 * w, w));
  outc_ = register_module("outc", OutConv(w, options.num_classes));
}

Tensor UNet::forward(const Tensor& x) {
  Tensor x1 = (*inc_)(x);      // (w, H, W)
  Tensor x2 = (*down1_)(x1);   // (2w, H / 2, W / 2)
  Tensor x3 = (*down2_)(x2);   // (4w, H / 4, W / 4)
  Tensor x4 = (*down3_)(x3);   // (8w, H / 8, W / 8)
  Tensor x5 = (*down4_)(x4);   // (16w, H / 16, W / 16)
  Tensor y = up1_->forward(x5, x4);  // (8w, H / 8, W / 8)
  y = up2_->forward(y, x3);
  y = up3_->forward(y, x2);
  y = up4_->forward(y, x1);    // (w, H, W)
  return (*outc_)(y);          // (num_classes, H, W)
}

std::shared_ptr<UNet> unet(UNetOptions options) { return std::make_shared<UNet>(options); }

}  // namespace loom::models
