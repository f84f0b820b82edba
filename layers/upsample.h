// File: layers/upsample.h
// Upsample, as torch.nn.Upsample: interpolate (core/ops/interpolate.h) with
// fixed options, for Sequential and models; PixelShuffle and PixelUnshuffle
// over loom::pixel_shuffle / pixel_unshuffle. No parameters.
//
//   nn::Upsample up({.scale_factor = 2.0, .mode = InterpolateMode::Bilinear});
//   nn::Upsample to({.size = Size2{64, 64}});   // nearest, to 64 x 64
#pragma once

#include <string>

#include "core/ops/interpolate.h"
#include "core/ops/shape_ops.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class Upsample : public Module {
 public:
  // Exactly one of size and scale_factor, as interpolate checks (here, at construction).
  explicit Upsample(InterpolateOptions options);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Upsample"; }
  std::string extra_repr() const override;  // "scale_factor=2.0, mode='bilinear'"
  const InterpolateOptions& options() const { return options_; }

 private:
  InterpolateOptions options_;
};

// (*, C r^2, H, W) -> (*, C, H r, W r), as torch.nn.PixelShuffle.
class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(int64_t upscale_factor);  // >= 1
  Tensor forward(const Tensor& x) override { return pixel_shuffle(x, upscale_factor_); }
  std::string type_name() const override { return "PixelShuffle"; }
  std::string extra_repr() const override;  // "upscale_factor=3"

 private:
  int64_t upscale_factor_;
};

// (*, C, H r, W r) -> (*, C r^2, H, W), as torch.nn.PixelUnshuffle.
class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor);  // >= 1
  Tensor forward(const Tensor& x) override { return pixel_unshuffle(x, downscale_factor_); }
  std::string type_name() const override { return "PixelUnshuffle"; }
  std::string extra_repr() const override;  // "downscale_factor=2"

 private:
  int64_t downscale_factor_;
};

}  // namespace loom::nn
