// File: core/cuda/gather.h
// The DataLoader's GPU-resident batches: gather a batch of images from a
// device-resident uint8 set, crop/flip each by its placement and normalize to
// float32, in one pass. The CPU reference is loom::data::gather_images
// (data/transforms.h): both compute value = fmaf(pixel, scale[c], shift[c]), so
// their outputs are bit-identical.
#pragma once

#include "core/cuda/gather_kernels.h"
#include "core/strided.h"

// N images, B batch, C channels, H, W image size
namespace loom::cuda {

// out (B, C, H, W) float32 <- images (N, C, H, W) uint8 at indices (B,) int64,
// placed by placements (B, 3) int32. Contiguous operands, C <= kMaxGatherChannels,
// indices < N (the caller guarantees all of it).
void gather_images(const Strided& out, const Strided& images, const Strided& indices,
                   const Strided& placements, const ImageGatherParams& params);
// out (B,) int64 <- labels (N,) int64 at indices (B,).
void gather_labels(const Strided& out, const Strided& labels, const Strided& indices);

}  // namespace loom::cuda
