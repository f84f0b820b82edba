// File: layers/upsample.cc
// Upsample: options checked at construction, forward is interpolate, and
// PyTorch's repr.
#include "layers/upsample.h"

#include <fmt/format.h>

#include "core/error.h"
#include "layers/repr.h"

namespace loom::nn {

Upsample::Upsample(InterpolateOptions options) : options_(options) {
  LOOM_CHECK(options_.size.has_value() != options_.scale_factor.has_value(), ValueError,
             "[Upsample] give exactly one of size and scale_factor (got {})",
             options_.size ? "both" : "neither");
  LOOM_CHECK(!options_.align_corners || options_.mode == InterpolateMode::Bilinear, ValueError,
             "[Upsample] align_corners applies to the bilinear mode only (mode is {})",
             interpolate_mode_name(options_.mode));
}

Tensor Upsample::forward(const Tensor& x) { return interpolate(x, options_); }

std::string Upsample::extra_repr() const {
  std::string info;
  if (options_.scale_factor) {
    const Scale2& s = *options_.scale_factor;
    info = "scale_factor=" + (s.h == s.w ? python_float(s.h)
                                         : "(" + python_float(s.h) + ", " + python_float(s.w) + ")");
  } else {
    info = "size=" + options_.size->str();
  }
  return info + fmt::format(", mode='{}'", interpolate_mode_name(options_.mode));
}

PixelShuffle::PixelShuffle(int64_t upscale_factor) : upscale_factor_(upscale_factor) {
  LOOM_CHECK(upscale_factor >= 1, ValueError, "[PixelShuffle] upscale_factor must be >= 1, got {}", upscale_factor);
}

std::string PixelShuffle::extra_repr() const { return fmt::format("upscale_factor={}", upscale_factor_); }

PixelUnshuffle::PixelUnshuffle(int64_t downscale_factor) : downscale_factor_(downscale_factor) {
  LOOM_CHECK(downscale_factor >= 1, ValueError, "[PixelUnshuffle] downscale_factor must be >= 1, got {}",
             downscale_factor);
}

std::string PixelUnshuffle::extra_repr() const { return fmt::format("downscale_factor={}", downscale_factor_); }

}  // namespace loom::nn
