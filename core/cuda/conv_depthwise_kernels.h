// File: core/cuda/conv_depthwise_kernels.h
// Launchers for the depthwise convolution kernels in conv_depthwise.cu
// (semantics in conv_depthwise.h). They return the launch status;
// core/cuda/conv_depthwise.cc checks the operands and the status.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cuda {

// How the weight gradient splits its work: channel tiles of `tile` channels
// (32 when the channels are innermost in memory, so a warp reads one pixel's
// channels; else 1, and the block's threads walk the pixels) times `chunks`
// slices of the N * P * Q pixels; partial sums are float32 (float64 for float64).
struct DepthwiseSplit {
  int tile = 1;
  int64_t chunks = 1;
};

inline DepthwiseSplit depthwise_wgrad_split(int64_t channels, int64_t pixels, bool channels_innermost) {
  constexpr int kThreadsPerBlock = 256, kPixelsPerThread = 8;
  constexpr int64_t kTargetBlocks = 1024, kMaxChunks = 65535;
  DepthwiseSplit split;
  split.tile = channels_innermost ? 32 : 1;
  const int64_t tiles = (channels + split.tile - 1) / split.tile;
  const int64_t rows = kThreadsPerBlock / split.tile;
  const int64_t most = std::max<int64_t>(1, (pixels + rows * kPixelsPerThread - 1) / (rows * kPixelsPerThread));
  split.chunks = std::clamp<int64_t>((kTargetBlocks + tiles - 1) / tiles, 1, std::min(most, kMaxChunks));
  return split;
}

// The split of the packed weight gradient (V channels per lane, channels-last)
// over `pixels` work items (pixels, or blocks of neighbouring columns, which are
// fewer): tiles of up to 32 lanes, and never more chunks than
// depthwise_wgrad_split gives for the same operands, so that the scratch sized
// by it always suffices.
inline DepthwiseSplit depthwise_wgrad_packed_split(int64_t channels, int V, int64_t pixels) {
  constexpr int kThreadsPerBlock = 256, kPixelsPerThread = 8;
  constexpr int64_t kTargetBlocks = 1024, kMaxChunks = 65535;
  const int64_t packs = channels / V;
  DepthwiseSplit split;
  while (split.tile < 32 && split.tile < packs) split.tile *= 2;
  const int64_t tiles = (packs + split.tile - 1) / split.tile;
  const int64_t rows = kThreadsPerBlock / split.tile;
  const int64_t most = std::max<int64_t>(1, (pixels + rows * kPixelsPerThread - 1) / (rows * kPixelsPerThread));
  split.chunks = std::clamp<int64_t>((kTargetBlocks + tiles - 1) / tiles, 1, std::min(most, kMaxChunks));
  split.chunks = std::min(split.chunks, depthwise_wgrad_split(channels, pixels, true).chunks);
  return split;
}

cudaError_t launch_conv_depthwise_forward(const Strided& y, const Strided& x, const Strided& w,
                                          const kernel::ConvParams& p, cudaStream_t stream);
cudaError_t launch_conv_depthwise_dgrad(const Strided& dx, const Strided& dy, const Strided& w,
                                        const kernel::ConvParams& p, cudaStream_t stream);
// scratch holds split.chunks * C * R * S partial sums (float32, float64 for float64).
cudaError_t launch_conv_depthwise_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                                        const kernel::ConvParams& p, const Strided& scratch,
                                        cudaStream_t stream);

}  // namespace loom::cuda
