// File: core/cuda/conv_wgrad_mma.cc
// Checked launches of the tensor-core weight gradient on the current stream.
#include "core/cuda/conv_wgrad_mma.h"

#include <cstdint>

#include "core/cuda/conv_wgrad_mma_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

constexpr int64_t kMaxChannels = 128, kMaxFilterSide = 7;

bool channel_multiple(int64_t channels) { return channels > 0 && channels % 16 == 0 && channels <= kMaxChannels; }

// Dense (N, C, H, W) with channels innermost, its base 16-byte aligned: the kernel loads 8 channels at once
// and reads a tile's dy rows as one run.
bool dense_channels_last(const Strided& t) {
  if (t.sizes.size() != 4) return false;
  const int64_t C = t.sizes[1], H = t.sizes[2], W = t.sizes[3];
  const bool dense = t.strides[1] == 1 && t.strides[3] == C && t.strides[2] == W * C &&
                     (t.sizes[0] == 1 || t.strides[0] == H * W * C);
  return dense && reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0;
}

}  // namespace

bool conv_wgrad_mma_supported(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p) {
  if (dw.sizes.size() != 4 || dy.sizes.size() != 4 || x.sizes.size() != 4) return false;
  if (x.dtype != DType::BFloat16 && x.dtype != DType::Float16 && x.dtype != DType::Float32) return false;
  if (dy.dtype != x.dtype || dw.dtype != x.dtype) return false;
  const int64_t K = dw.sizes[0], C = dw.sizes[1], R = dw.sizes[2], S = dw.sizes[3];
  return p.groups == 1 && p.dilation_h == 1 && p.dilation_w == 1 && C == x.sizes[1] && K == dy.sizes[1] &&
         x.sizes[0] == dy.sizes[0] && channel_multiple(C) && channel_multiple(K) && R <= kMaxFilterSide &&
         S <= kMaxFilterSide && dense_channels_last(x) && dense_channels_last(dy) &&
         conv_wgrad_mma_fits(dw, dy, x, p);
}

Scratch conv_wgrad_mma_scratch(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p) {
  return {.elements = conv_wgrad_mma_partials(dw, dy, x, p), .dtype = DType::Float32};
}

void conv_wgrad_mma(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p,
                    const Strided& scratch) {
  LOOM_CHECK(conv_wgrad_mma_supported(dw, dy, x, p), ValueError,
             "[conv_wgrad_mma] takes dense channels-last 16-byte-aligned bfloat16/float16/float32 x and dy, C and K "
             "multiples of 16 up to {}, filters up to {}x{}, groups and dilation 1; got x {} {}, dy {} {}, "
             "dw {} {}, groups {}, dilation {}x{}",
             kMaxChannels, kMaxFilterSide, kMaxFilterSide, shape_str(x.sizes), dtype_name(x.dtype),
             shape_str(dy.sizes), dtype_name(dy.dtype), shape_str(dw.sizes), dtype_name(dw.dtype), p.groups,
             p.dilation_h, p.dilation_w);
  check_scratch("conv_wgrad_mma", scratch, conv_wgrad_mma_scratch(dw, dy, x, p));
  LOOM_CUDA_CHECK(launch_conv_wgrad_mma(dw, dy, x, p, scratch.ptr<float>(), current_stream()));
}

}  // namespace loom::cuda
