// File: core/cpu/interpolate.h
// Resampling kernels behind loom::interpolate (core/ops/interpolate.h): x (N,
// C, H, W) -> y (N, C, P, Q) by nearest neighbour or bilinear interpolation,
// with PyTorch's index conventions (interpolate_math.h). Any strides; the
// gradient gathers, for each input element, the output elements that read it,
// in a fixed order (deterministic, and the same order on the GPU).
//
// N batch, C channels, H, W input plane, P, Q output plane.
#pragma once

#include <cstdint>

#include "core/strided.h"

namespace loom::cpu {

enum class InterpolateMode : uint8_t { Nearest, Bilinear };

struct InterpolateSpec {
  InterpolateMode mode = InterpolateMode::Nearest;
  bool align_corners = false;  // bilinear: corner pixels' centres align
  // The user's scale factors when the output size came from them (PyTorch then
  // maps indices with 1 / scale, not H / P); 0: none given, H / P and W / Q.
  double scale_h = 0.0, scale_w = 0.0;
};

// y = x resampled to y's plane. Floating dtypes.
void interpolate(const Strided& y, const Strided& x, const InterpolateSpec& spec);
// dx = the gradient of interpolate for dy (y's sizes). Floating dtypes.
void interpolate_backward(const Strided& dx, const Strided& dy, const InterpolateSpec& spec);

}  // namespace loom::cpu
