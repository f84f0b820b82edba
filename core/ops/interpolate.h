// File: core/ops/interpolate.h
// Resizing images, as torch.nn.functional.interpolate for 4-D input:
//
//   Tensor up = interpolate(x, {.scale_factor = 2.0});                      // nearest, 2H x 2W
//   Tensor b = interpolate(x, {.size = Size2{64, 48}, .mode = InterpolateMode::Bilinear});
//   Tensor c = interpolate(x, {.scale_factor = Scale2{1.5, 2.0},
//                              .mode = InterpolateMode::Bilinear, .align_corners = true});
//
// N batch, C channels, H, W input plane, P, Q output plane.
// x (N, C, H, W), floating, any layout (a channels-last x gives a channels-last
// y) -> y (N, C, P, Q), with (P, Q) = size, or floor(H * scale_h) and
// floor(W * scale_w). Index conventions are PyTorch's exactly
// (core/kernel/interpolate.h): given a scale factor, output index o maps to
// input coordinate o / scale (not o * H / P) unless recompute_scale_factor;
// bilinear without align_corners samples pixel centres (half-pixel offsets,
// clamped at 0), with align_corners the corner pixels of x and y coincide.
// Differentiable: each input pixel gets the weighted sum of the gradients of
// the output pixels that read it (a fixed order: the same bits every run).
#pragma once

#include <optional>

#include "core/cpu/interpolate.h"
#include "core/size2.h"
#include "core/tensor.h"

namespace loom {

using kernel::InterpolateMode;

// A (height, width) pair of scale factors, one number when both are equal.
struct Scale2 {
  double h;
  double w;

  Scale2(double both) : h(both), w(both) {}  // implicit: `.scale_factor = 2.0`
  Scale2(double height, double width) : h(height), w(width) {}

  bool operator==(const Scale2&) const = default;
};

struct InterpolateOptions {
  std::optional<Size2> size = std::nullopt;           // the output plane (P, Q); or
  std::optional<Scale2> scale_factor = std::nullopt;  // exactly one of the two
  InterpolateMode mode = InterpolateMode::Nearest;
  bool align_corners = false;  // bilinear only (PyTorch's default, False)
  // Map indices with H / P (the sizes) even when a scale factor gave the size,
  // as PyTorch's recompute_scale_factor=True.
  bool recompute_scale_factor = false;
};

Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

const char* interpolate_mode_name(InterpolateMode mode);  // "nearest", "bilinear"

}  // namespace loom
