// File: data/transforms.h
// Image transforms on (N, C, H, W) batches: normalize (uint8 pixels to float32),
// random crop with zero padding and random horizontal flip, as torchvision's
// RandomCrop(H, padding) + RandomHorizontalFlip() + ToTensor() + Normalize().
//
//   loom::Generator gen(0);
//   auto x = loom::data::augment(images, {.padding = 4, .flip = true}, gen);
//   auto y = loom::data::normalize(x, {0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616});
//
// Randomness is drawn once per image as a Placement (where the image's pixels
// are read from), so the same draws can be replayed on the CPU or, by the
// DataLoader's GPU-resident mode, on the device, with identical results.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

// N images, B batch, C channels, H, W image size, P padding
namespace loom::data {

struct Augment {
  int64_t padding = 0;  // random crop of H x W from the image zero-padded by P per side
  bool flip = false;    // mirror left-right with probability 1/2
};

// Where an output image reads from: output pixel (h, w) is pixel
// (top + h - P, left + w' - P) of the input, with w' = W - 1 - w when flip is
// set and w otherwise; pixels outside the input are 0. top and left are in
// [0, 2P]; top = left = P with flip = 0 is the identity. int32 fields, laid out
// as the (B, 3) int32 rows the GPU gather reads.
struct Placement {
  int32_t top = 0;
  int32_t left = 0;
  int32_t flip = 0;
};

// Image i's placement from Philox block first_block + i of `seed`: top and left
// uniform in [0, 2P], flip with probability 1/2 when augment.flip. The
// generator overload reserves `count` blocks of `gen`.
std::vector<Placement> draw_placements(int64_t count, const Augment& augment, uint64_t seed,
                                       uint64_t first_block);
std::vector<Placement> draw_placements(int64_t count, const Augment& augment, Generator& gen);

// images (N, C, H, W) of any dtype and strides -> (N, C, H, W) contiguous, same
// dtype: image i placed by placements[i] (padding P zero pixels per side).
Tensor apply_placements(const Tensor& images, std::span<const Placement> placements,
                        int64_t padding);
// Random crop and flip with fresh draws from `gen` (one block per image).
Tensor augment(const Tensor& images, const Augment& augment, Generator& gen);
Tensor random_crop(const Tensor& images, int64_t padding, Generator& gen);
Tensor random_flip(const Tensor& images, Generator& gen);

// Per-channel affine map of uint8 pixels: value = pixel * scale[c] + shift[c]
// (one fused multiply-add), with scale = 1 / (255 std) and shift = -mean / std,
// i.e. (pixel / 255 - mean) / std. mean and stddev have C entries, or 1 entry
// for every channel, or none (mean 0, std 1: pixels scaled to [0, 1]).
struct Normalization {
  std::vector<float> scale;  // (C,)
  std::vector<float> shift;  // (C,)
};
Normalization make_normalization(int64_t channels, const std::vector<double>& mean,
                                 const std::vector<double>& stddev);

// images (N, C, H, W) uint8 -> float32 (pixel / 255 - mean[c]) / stddev[c].
Tensor normalize(const Tensor& images, const std::vector<double>& mean,
                 const std::vector<double>& stddev);

// The DataLoader's fused step, also the CPU reference of the GPU gather
// (core/cuda/gather.h): out[b] = normalized(placed(images[indices[b]])).
// images (N, C, H, W) uint8 contiguous on the CPU; out points at B * C * H * W
// floats; indices and placements have B entries (indices < N).
void gather_images(const Tensor& images, std::span<const int64_t> indices,
                   std::span<const Placement> placements, int64_t padding,
                   const Normalization& normalization, float* out);

}  // namespace loom::data
