// File: core/cuda/conv_small.cc
// Checked launches of the small-channel convolution kernels on the current stream.
#include "core/cuda/conv_small.h"

#include "core/cuda/conv_small_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {
constexpr int64_t kFewChannels = 8, kMaxFilterSide = 7;
// With few output channels the kernels still reduce over up to this many input
// channels; beyond it cuDNN's implicit GEMM has the long reduction it is built for.
constexpr int64_t kMaxReducedChannels = 64;

// A direct convolution from `in` channels to `out` channels is worth racing
// against cuDNN's implicit GEMM, whose tiles reduce over in * R * S and span
// `out` channels: with few on either side most of a tile idles or waits on loads
// (a network's first layer on RGB images, a segmentation head's 1x1 to 2 classes).
bool few_channels(int64_t in, int64_t out) {
  return in <= kFewChannels || (out <= kFewChannels && in <= kMaxReducedChannels);
}

bool small_dtype(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::BFloat16 || dtype == DType::Float16;
}
}  // namespace

bool conv_small_supported(const Strided& x, const Strided& w, const kernel::ConvParams& p) {
  if (x.sizes.size() != 4 || w.sizes.size() != 4 || !small_dtype(x.dtype) || w.dtype != x.dtype) {
    return false;
  }
  const int64_t K = w.sizes[0], C = w.sizes[1], R = w.sizes[2], S = w.sizes[3];
  return p.groups == 1 && p.dilation_h == 1 && p.dilation_w == 1 && C == x.sizes[1] &&
         few_channels(C, K) && R <= kMaxFilterSide && S <= kMaxFilterSide &&
         conv_small_fits(K, C, R, S, p.stride_w);
}

bool conv_small_dgrad_supported(const Strided& dy, const Strided& w, const kernel::ConvParams& p) {
  if (dy.sizes.size() != 4 || w.sizes.size() != 4 || !small_dtype(dy.dtype) || w.dtype != dy.dtype) {
    return false;
  }
  const int64_t K = w.sizes[0], C = w.sizes[1], R = w.sizes[2], S = w.sizes[3];
  return p.groups == 1 && p.dilation_h == 1 && p.dilation_w == 1 && p.stride_h == 1 &&
         p.stride_w == 1 && K == dy.sizes[1] && few_channels(K, C) &&
         R <= kMaxFilterSide && S <= kMaxFilterSide && p.pad_h <= R - 1 && p.pad_w <= S - 1 &&
         conv_small_forward_fits(C, K, R, S, 1);
}

bool conv_small_epilogue_supported(const SmallConvEpilogue& e, const Strided& w) {
  return !e.bias ||
         (e.bias->dtype == w.dtype && e.bias->sizes.size() == 1 && e.bias->sizes[0] == w.sizes[0]);
}

void conv_small_forward(const Strided& y, const Strided& x, const Strided& w,
                        const kernel::ConvParams& p, const SmallConvEpilogue& epilogue) {
  LOOM_CHECK(conv_small_epilogue_supported(epilogue, w), ValueError,
             "[conv_small_forward] the bias must be 1-D with the filter's {} output channels and "
             "its dtype {}; got sizes {} of {}",
             w.sizes[0], dtype_name(w.dtype), shape_str(epilogue.bias->sizes),
             dtype_name(epilogue.bias->dtype));
  const Strided* bias = epilogue.bias ? &*epilogue.bias : nullptr;
  LOOM_CUDA_CHECK(launch_conv_small_forward(y, x, w, bias, epilogue.relu, p, current_stream()));
}

Scratch conv_small_wgrad_scratch(const Strided& dy, const Strided& dw) {
  return {.elements = conv_small_wgrad_partials(dy, dw), .dtype = DType::Float32};
}

void conv_small_dgrad(const Strided& dx, const Strided& dy, const Strided& w, const kernel::ConvParams& p) {
  LOOM_CHECK(conv_small_dgrad_supported(dy, w, p) && dx.dtype == dy.dtype, ValueError,
             "[conv_small_dgrad] takes stride 1, dilation 1, padding at most the filter's size - 1, "
             "K <= {} (or C <= {} and K <= {}) of one float32/bfloat16/float16 dtype; got dy {} {}, w {} {}, "
             "dx {}, stride {}x{}, pad {}x{}",
             kFewChannels, kFewChannels, kMaxReducedChannels, shape_str(dy.sizes), dtype_name(dy.dtype),
             shape_str(w.sizes), dtype_name(w.dtype), dtype_name(dx.dtype), p.stride_h, p.stride_w,
             p.pad_h, p.pad_w);
  LOOM_CUDA_CHECK(launch_conv_small_dgrad(dx, dy, w, p, current_stream()));
}

bool conv_small_wgrad_takes_bias(const Strided& w_or_dw) {
  return w_or_dw.sizes[0] <= conv_small_wgrad_threads(w_or_dw);
}

void conv_small_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                      const kernel::ConvParams& p, const Strided& scratch,
                      const std::optional<Strided>& db) {
  check_scratch("conv_small_wgrad", scratch, conv_small_wgrad_scratch(dy, dw));
  LOOM_CHECK(!db || (db->dtype == dw.dtype && db->sizes.size() == 1 &&
                     db->sizes[0] == dw.sizes[0] && conv_small_wgrad_takes_bias(dw)),
             ValueError,
             "[conv_small_wgrad] db must be 1-D with dw's {} output channels (at most the "
             "block's threads: see conv_small_wgrad_takes_bias) and dw's dtype {}; got sizes {} of {}",
             dw.sizes[0], dtype_name(dw.dtype), shape_str(db->sizes), dtype_name(db->dtype));
  LOOM_CUDA_CHECK(launch_conv_small_wgrad(dw, db ? &*db : nullptr, dy, x, p, scratch.ptr<float>(),
                                          current_stream()));
}

}  // namespace loom::cuda
