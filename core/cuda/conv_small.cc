// File: core/cuda/conv_small.cc
// Checked launches of the small-channel convolution kernels on the current stream.
#include "core/cuda/conv_small.h"

#include "core/cuda/conv_small_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {
constexpr int64_t kMaxInChannels = 8, kMaxFilterSide = 7;

bool small_dtype(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::BFloat16 || dtype == DType::Float16;
}
}  // namespace

bool conv_small_supported(const Strided& x, const Strided& w, const cpu::ConvParams& p) {
  if (x.sizes.size() != 4 || w.sizes.size() != 4 || !small_dtype(x.dtype) || w.dtype != x.dtype) {
    return false;
  }
  const int64_t K = w.sizes[0], C = w.sizes[1], R = w.sizes[2], S = w.sizes[3];
  return p.groups == 1 && p.dilation_h == 1 && p.dilation_w == 1 && C == x.sizes[1] &&
         C <= kMaxInChannels && R <= kMaxFilterSide && S <= kMaxFilterSide &&
         conv_small_fits(K, C, R, S, p.stride_w);
}

bool conv_small_epilogue_supported(const SmallConvEpilogue& e, const Strided& w) {
  return !e.bias ||
         (e.bias->dtype == w.dtype && e.bias->sizes.size() == 1 && e.bias->sizes[0] == w.sizes[0]);
}

void conv_small_forward(const Strided& y, const Strided& x, const Strided& w,
                        const cpu::ConvParams& p, const SmallConvEpilogue& epilogue) {
  LOOM_CHECK(conv_small_epilogue_supported(epilogue, w), ValueError,
             "[conv_small_forward] the bias must be 1-D with the filter's {} output channels and "
             "its dtype {}; got sizes {} of {}",
             w.sizes[0], dtype_name(w.dtype), shape_str(epilogue.bias->sizes),
             dtype_name(epilogue.bias->dtype));
  const Strided* bias = epilogue.bias ? &*epilogue.bias : nullptr;
  LOOM_CUDA_CHECK(launch_conv_small_forward(y, x, w, bias, epilogue.relu, p, current_stream()));
}

int64_t conv_small_wgrad_scratch(const Strided& dy, const Strided& dw) {
  return conv_small_wgrad_partials(dy, dw);
}

bool conv_small_wgrad_takes_bias(const Strided& w_or_dw) {
  return w_or_dw.sizes[0] <= conv_small_wgrad_threads(w_or_dw);
}

void conv_small_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                      const cpu::ConvParams& p, const Strided& scratch,
                      const std::optional<Strided>& db) {
  LOOM_CHECK(scratch.dtype == DType::Float32 && scratch.numel() >= conv_small_wgrad_partials(dy, dw),
             ValueError, "[conv_small_wgrad] needs {} float32 scratch elements, got {} of {}",
             conv_small_wgrad_partials(dy, dw), scratch.numel(), dtype_name(scratch.dtype));
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
