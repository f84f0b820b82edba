// File: core/cuda/gather_kernels.h
// Launchers for the kernels in gather.cu, the DataLoader's GPU-resident mode.
// They return the launch status; core/cuda/gather.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/strided.h"

// N images, B batch, C channels, H, W image size, P padding
namespace loom::cuda {

// Images have at most this many channels (gray, RGB, RGBA).
constexpr int kMaxGatherChannels = 4;

// Where a batch image reads its pixels and how they are normalized: the
// placement rule and value = fmaf(pixel, scale[c], shift[c]) of data/transforms.h.
struct ImageGatherParams {
  int64_t padding = 0;  // P
  float scale[kMaxGatherChannels] = {};
  float shift[kMaxGatherChannels] = {};
};

// out (B, C, H, W) float32, images (N, C, H, W) uint8, indices (B,) int64 < N,
// placements (B, 3) int32 rows (top, left, flip); all contiguous.
cudaError_t launch_gather_images(const Strided& out, const Strided& images, const Strided& indices,
                                 const Strided& placements, const ImageGatherParams& params,
                                 cudaStream_t stream);
// out (B,) int64 = labels[indices]; labels (N,) int64; contiguous.
cudaError_t launch_gather_labels(const Strided& out, const Strided& labels, const Strided& indices,
                                 cudaStream_t stream);

}  // namespace loom::cuda
