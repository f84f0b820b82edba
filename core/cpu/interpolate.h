// File: core/cpu/interpolate.h
// Resampling kernels behind loom::interpolate (core/ops/interpolate.h): x (N,
// C, H, W) -> y (N, C, P, Q) by nearest neighbour or bilinear interpolation,
// with PyTorch's index conventions (core/kernel/interpolate.h). Any strides; the
// gradient gathers, for each input element, the output elements that read it,
// in a fixed order (deterministic, and the same order on the GPU).
//
// N batch, C channels, H, W input plane, P, Q output plane.
#pragma once

#include <cstdint>

#include "core/kernel/interpolate.h"
#include "core/strided.h"

namespace loom::cpu {

// y = x resampled to y's plane. Floating dtypes.
void interpolate(const Strided& y, const Strided& x, const kernel::InterpolateSpec& spec);
// dx = the gradient of interpolate for dy (y's sizes). Floating dtypes.
void interpolate_backward(const Strided& dx, const Strided& dy, const kernel::InterpolateSpec& spec);

}  // namespace loom::cpu
