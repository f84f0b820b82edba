// File: data/transforms.cc
// Placements (random crop + flip), normalization, and the fused batch gather.
#include "data/transforms.h"

#include <cmath>

#include "core/error.h"

// N images, B batch, C channels, H, W image size, P padding
namespace loom::data {

namespace {

struct ImageGeometry {
  int64_t channels, height, width, padding;
};

ImageGeometry geometry_of(const Tensor& images, int64_t padding) {
  return {images.size(1), images.size(2), images.size(3), padding};
}

// out (C, H, W) = image (C, H, W) read through `p`; convert(c, value) maps each
// input value (0 for pixels in the padding) to an output element.
template <class In, class Out, class Convert>
void place_image(const In* image, Out* out, const ImageGeometry& g, Placement p, Convert convert) {
  const int64_t H = g.height, W = g.width;
  for (int64_t c = 0; c < g.channels; ++c) {
    const In* plane = image + c * H * W;
    const Out zero = convert(c, In{});
    for (int64_t h = 0; h < H; ++h) {
      Out* row = out + (c * H + h) * W;
      const int64_t sh = p.top + h - g.padding;
      for (int64_t w = 0; w < W; ++w) {
        const int64_t sw = p.left + (p.flip ? W - 1 - w : w) - g.padding;
        const bool inside = sh >= 0 && sh < H && sw >= 0 && sw < W;
        row[w] = inside ? convert(c, plane[sh * W + sw]) : zero;
      }
    }
  }
}

// Accepts the arguments each transform shares: a 4-D image batch.
void check_images(const Tensor& images, std::string_view op) {
  LOOM_CHECK(images.defined(), ValueError, "[{}] the images tensor is undefined", op);
  LOOM_CHECK(images.dim() == 4, ShapeError, "[{}] images must be (N, C, H, W), got shape {}", op,
             shape_str(images.sizes()));
  LOOM_CHECK(images.device().is_cpu(), DeviceError,
             "[{}] transforms run on the CPU; got images on {} (the DataLoader's resident "
             "mode augments on the GPU)",
             op, images.device().str());
}

std::vector<double> per_channel(const std::vector<double>& values, int64_t channels,
                                double fallback, std::string_view name) {
  if (values.empty()) return std::vector<double>(channels, fallback);
  if (values.size() == 1) return std::vector<double>(channels, values[0]);
  LOOM_CHECK(static_cast<int64_t>(values.size()) == channels, ValueError,
             "[normalize] {} has {} values for {} channels; give one per channel or one for all",
             name, values.size(), channels);
  return values;
}

}  // namespace

std::vector<Placement> draw_placements(int64_t count, const Augment& augment, uint64_t seed,
                                       uint64_t first_block) {
  LOOM_CHECK(augment.padding >= 0, ValueError, "[augment] padding must be >= 0, got {}",
             augment.padding);
  const uint64_t positions = 2 * static_cast<uint64_t>(augment.padding) + 1;
  std::vector<Placement> placements(count);
  for (int64_t i = 0; i < count; ++i) {
    const PhiloxBlock bits = philox_block(seed, first_block + i);
    placements[i].top = static_cast<int32_t>(bits.lane[0] % positions);
    placements[i].left = static_cast<int32_t>(bits.lane[1] % positions);
    placements[i].flip = augment.flip && uniform_float(bits.lane[2]) < 0.5f;
  }
  return placements;
}

std::vector<Placement> draw_placements(int64_t count, const Augment& augment, Generator& gen) {
  return draw_placements(count, augment, gen.seed(), gen.reserve(count));
}

Tensor apply_placements(const Tensor& images, std::span<const Placement> placements,
                        int64_t padding) {
  check_images(images, "augment");
  LOOM_CHECK(static_cast<int64_t>(placements.size()) == images.size(0), ShapeError,
             "[augment] {} placements for {} images (shape {})", placements.size(), images.size(0),
             shape_str(images.sizes()));
  const Tensor input = images.contiguous();
  Tensor out = empty(input.sizes(), {.dtype = input.dtype()});
  const ImageGeometry g = geometry_of(input, padding);
  const int64_t image_numel = g.channels * g.height * g.width;
  visit_dtype(input.dtype(), [&]<class T>() {
    const T* in = input.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for (int64_t n = 0; n < input.size(0); ++n) {
      place_image(in + n * image_numel, dst + n * image_numel, g, placements[n],
                  [](int64_t, T value) { return value; });
    }
  });
  return out;
}

Tensor augment(const Tensor& images, const Augment& augment, Generator& gen) {
  check_images(images, "augment");
  return apply_placements(images, draw_placements(images.size(0), augment, gen), augment.padding);
}

Tensor random_crop(const Tensor& images, int64_t padding, Generator& gen) {
  return augment(images, {.padding = padding}, gen);
}

Tensor random_flip(const Tensor& images, Generator& gen) {
  return augment(images, {.flip = true}, gen);
}

Normalization make_normalization(int64_t channels, const std::vector<double>& mean,
                                 const std::vector<double>& stddev) {
  const std::vector<double> m = per_channel(mean, channels, 0.0, "mean");
  const std::vector<double> s = per_channel(stddev, channels, 1.0, "stddev");
  Normalization normalization;
  for (int64_t c = 0; c < channels; ++c) {
    LOOM_CHECK(s[c] > 0 && std::isfinite(s[c]) && std::isfinite(m[c]), ValueError,
               "[normalize] channel {} has mean {} and stddev {}; stddev must be positive and "
               "both finite",
               c, m[c], s[c]);
    normalization.scale.push_back(static_cast<float>(1.0 / (255.0 * s[c])));
    normalization.shift.push_back(static_cast<float>(-m[c] / s[c]));
  }
  return normalization;
}

Tensor normalize(const Tensor& images, const std::vector<double>& mean,
                 const std::vector<double>& stddev) {
  check_images(images, "normalize");
  LOOM_CHECK(images.dtype() == DType::UInt8, TypeError,
             "[normalize] images must be uint8 pixels (0-255), got {}", dtype_name(images.dtype()));
  const Normalization norm = make_normalization(images.size(1), mean, stddev);
  const Tensor input = images.contiguous();
  const int64_t n = input.size(0);
  std::vector<int64_t> indices(n);
  for (int64_t i = 0; i < n; ++i) indices[i] = i;
  const std::vector<Placement> identity(n);  // top = left = 0 with no padding
  Tensor out = empty(input.sizes());
  gather_images(input, indices, identity, /*padding=*/0, norm, out.data_ptr<float>());
  return out;
}

void gather_images(const Tensor& images, std::span<const int64_t> indices,
                   std::span<const Placement> placements, int64_t padding,
                   const Normalization& normalization, float* out) {
  const ImageGeometry g = geometry_of(images, padding);
  const int64_t image_numel = g.channels * g.height * g.width;
  const uint8_t* pixels = images.data_ptr<uint8_t>();
  const float* scale = normalization.scale.data();
  const float* shift = normalization.shift.data();
  // fma, as the GPU gather computes it, so both devices give identical bits.
  auto convert = [=](int64_t c, uint8_t v) { return std::fma(float(v), scale[c], shift[c]); };
  for (size_t b = 0; b < indices.size(); ++b) {
    place_image(pixels + indices[b] * image_numel, out + b * image_numel, g, placements[b],
                convert);
  }
}

}  // namespace loom::data
