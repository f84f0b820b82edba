// File: core/ops/interpolate.cc
// interpolate: the options checked and turned into an output size and the
// kernels' scale factors as PyTorch derives them, the kernel dispatch, and the
// backward beside it.
//
// N batch, C channels, H, W input plane, P, Q output plane.
#include "core/ops/interpolate.h"

#include <fmt/format.h>

#include <cmath>

#include "core/autograd.h"
#include "core/cuda/interpolate.h"
#include "core/error.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/trace.h"

namespace loom {

namespace {

struct Resampling {
  int64_t P = 0, Q = 0;
  kernel::InterpolateSpec spec;
};

// floor(extent * scale) as PyTorch computes it, in double.
int64_t scaled_extent(int64_t extent, double scale) {
  return static_cast<int64_t>(std::floor(static_cast<double>(extent) * scale));
}

void check_input(const Tensor& x, const InterpolateOptions& o) {
  check_float_tensor(x, "interpolate", "x");
  LOOM_CHECK(x.dim() == 4, ShapeError,
             "[interpolate] x must be (N, C, H, W), got shape {}; for one image (C, H, W) "
             "use x.unsqueeze(0)",
             shape_str(x.sizes()));
  LOOM_CHECK(o.size.has_value() != o.scale_factor.has_value(), ValueError,
             "[interpolate] give exactly one of size and scale_factor (got {})",
             o.size ? "both" : "neither");
  LOOM_CHECK(!o.align_corners || o.mode == InterpolateMode::Bilinear, ValueError,
             "[interpolate] align_corners applies to the bilinear mode only (mode is {})",
             interpolate_mode_name(o.mode));
  if (o.scale_factor) {
    LOOM_CHECK(o.scale_factor->h > 0 && o.scale_factor->w > 0 &&
                   std::isfinite(o.scale_factor->h) && std::isfinite(o.scale_factor->w),
               ValueError, "[interpolate] scale factors must be positive and finite, got ({}, {})",
               o.scale_factor->h, o.scale_factor->w);
  }
}

Resampling resampling(const Tensor& x, const InterpolateOptions& o) {
  check_input(x, o);
  const int64_t H = x.size(2), W = x.size(3);
  Resampling r;
  r.spec = {.mode = o.mode, .align_corners = o.align_corners};
  if (o.size) {
    r.P = o.size->h;
    r.Q = o.size->w;
  } else {
    r.P = scaled_extent(H, o.scale_factor->h);
    r.Q = scaled_extent(W, o.scale_factor->w);
    if (!o.recompute_scale_factor) {
      r.spec.scale_h = o.scale_factor->h;
      r.spec.scale_w = o.scale_factor->w;
    }
  }
  LOOM_CHECK(H > 0 && W > 0 && r.P > 0 && r.Q > 0, ShapeError,
             "[interpolate] input and output planes must be non-empty, got input (H: {}, W: {}) "
             "and output (H: {}, W: {}) for x of shape {}",
             H, W, r.P, r.Q, shape_str(x.sizes()));
  return r;
}

}  // namespace

const char* interpolate_mode_name(InterpolateMode mode) {
  return mode == InterpolateMode::Nearest ? "nearest" : "bilinear";
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& options) {
  trace::OpScope trace("interpolate");
  const Resampling r = resampling(x, options);
  const MemoryFormat format = x.suggest_memory_format();
  Tensor y = empty({x.size(0), x.size(1), r.P, r.Q},
                   {.dtype = x.dtype(), .device = x.device(), .memory_format = format});
  LOOM_KERNEL(y, interpolate, y.strided(), x.strided(), r.spec);
  if (needs_grad({x})) {
    record(fmt::format("interpolate({})", interpolate_mode_name(options.mode)), {x}, y,
           [spec = r.spec, x_sizes = x.sizes(), format](const Tensor& dy) {
             Tensor dx = empty(x_sizes, {.dtype = dy.dtype(), .device = dy.device(),
                                         .memory_format = format});
             LOOM_KERNEL(dx, interpolate_backward, dx.strided(), dy.strided(), spec);
             return std::vector<Tensor>{dx};
           });
  }
  if (trace.recording()) {
    // A scale factor kept as given maps indices by 1 / scale; otherwise by the sizes.
    std::vector<trace::Attribute> attributes = {{"mode", std::string(interpolate_mode_name(options.mode))},
                                                {"align_corners", int64_t{options.align_corners}}};
    if (options.scale_factor && !options.recompute_scale_factor) {
      attributes.push_back({"scale_factor", std::vector<double>{options.scale_factor->h, options.scale_factor->w}});
    }
    trace.record({x}, y, std::move(attributes));
  }
  return y;
}

}  // namespace loom
