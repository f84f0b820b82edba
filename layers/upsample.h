// File: layers/upsample.h
// Upsample, as torch.nn.Upsample: interpolate (core/ops/interpolate.h) with
// fixed options, for Sequential and models. No parameters.
//
//   nn::Upsample up({.scale_factor = 2.0, .mode = InterpolateMode::Bilinear});
//   nn::Upsample to({.size = Size2{64, 64}});   // nearest, to 64 x 64
#pragma once

#include <string>

#include "core/ops/interpolate.h"
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

}  // namespace loom::nn
