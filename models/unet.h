// File: models/unet.h
// A small U-Net, written as milesial's Pytorch-UNet writes it (its class and
// parameter names): DoubleConv, Down (max pool, DoubleConv), Up (a 2x2
// stride-2 ConvTranspose2d to half the channels, concatenation with the skip
// connection along the channels, DoubleConv) and OutConv (1x1), four levels
// down and up. `width` is the first level's channels (milesial's 64; 16 here
// by default, hence small). The twin is in models/torch_models.py.
//
//   auto net = models::unet({.in_channels = 3, .num_classes = 2});
//   Tensor logits = (*net)(x);  // x (N, 3, H, W), H and W multiples of 16 -> (N, 2, H, W)
//
// N batch, C channels, H, W.
#pragma once

#include <cstdint>
#include <memory>

#include "layers/nn.h"

namespace loom::models {

// (conv 3x3 without bias -> BN -> ReLU) twice, in the child "double_conv".
class DoubleConv : public nn::Module {
 public:
  DoubleConv(int64_t in_channels, int64_t out_channels);
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, out, H, W)

 private:
  std::shared_ptr<nn::Sequential> double_conv_;
};

// 2x2 max pool, then DoubleConv, in the child "maxpool_conv".
class Down : public nn::Module {
 public:
  Down(int64_t in_channels, int64_t out_channels);
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, out, H / 2, W / 2)

 private:
  std::shared_ptr<nn::Sequential> maxpool_conv_;
};

// up(x) (in -> in / 2 channels, twice the size), concatenated after the skip
// connection's channels, then DoubleConv.
class Up : public nn::Module {
 public:
  Up(int64_t in_channels, int64_t out_channels);
  // x (N, in, H, W), skip (N, in / 2, 2H, 2W) -> (N, out, 2H, 2W). ShapeError
  // when the skip's size is not twice x's (milesial pads; sizes that are
  // multiples of 16 never need it).
  Tensor forward(const Tensor& x, const Tensor& skip);

 private:
  std::shared_ptr<nn::ConvTranspose2d> up_;
  std::shared_ptr<DoubleConv> conv_;
};

// A 1x1 conv to the classes, in the child "conv".
class OutConv : public nn::Module {
 public:
  OutConv(int64_t in_channels, int64_t out_channels);
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, out, H, W)

 private:
  std::shared_ptr<nn::Conv2d> conv_;
};

struct UNetOptions {
  int64_t in_channels = 3;
  int64_t num_classes = 2;
  int64_t width = 16;  // the first level's channels; each level down doubles them
};

class UNet : public nn::Module {
 public:
  explicit UNet(UNetOptions options = {});
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, num_classes, H, W)

 private:
  std::shared_ptr<DoubleConv> inc_;
  std::shared_ptr<Down> down1_, down2_, down3_, down4_;
  std::shared_ptr<Up> up1_, up2_, up3_, up4_;
  std::shared_ptr<OutConv> outc_;
};

std::shared_ptr<UNet> unet(UNetOptions options = {});

}  // namespace loom::models
