// File: core/cpu/interpolate.cc
// Resampling loops: one output pixel (forward) or one input pixel's gradient
// (backward) per index, in the written tensor's memory order, split over the
// thread pool; the index math is core/kernel/interpolate.h's, shared with the GPU.
//
// N batch, C channels, H, W input plane, P, Q output plane.
#include "core/cpu/interpolate.h"

#include "core/dtype.h"
#include "core/kernel/interpolate.h"
#include "core/parallel.h"

namespace loom::cpu {

namespace {

constexpr int64_t kInterpolateGrain = 1 << 12;

// NHWC strides (channels densest) rather than NCHW ones.
bool channels_last(const Strided& t) { return t.strides[1] < t.strides[3]; }

}  // namespace

void interpolate(const Strided& y, const Strided& x, const kernel::InterpolateSpec& spec) {
  const int64_t C = y.sizes[1], P = y.sizes[2], Q = y.sizes[3];
  visit_float(y.dtype, [&]<class T>() {
    const auto plan =
        kernel::math::interpolate_plan<T>(spec, x.sizes[2], x.sizes[3], P, Q, channels_last(y));
    T* out = y.ptr<T>();
    const T* in = x.ptr<T>();
    parallel_for(0, y.numel(), kInterpolateGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const kernel::math::Pixel p = kernel::math::pixel_at(i, C, P, Q, plan.channels_last);
        const T* plane = in + p.n * x.strides[0] + p.c * x.strides[1];
        out[p.n * y.strides[0] + p.c * y.strides[1] + p.row * y.strides[2] + p.col * y.strides[3]] =
            kernel::math::interpolate_value(plan, p.row, p.col, x.strides[2], x.strides[3],
                                    [plane](int64_t o) { return plane[o]; });
      }
    });
  });
}

void interpolate_backward(const Strided& dx, const Strided& dy, const kernel::InterpolateSpec& spec) {
  const int64_t C = dx.sizes[1], H = dx.sizes[2], W = dx.sizes[3];
  visit_float(dx.dtype, [&]<class T>() {
    const auto plan =
        kernel::math::interpolate_plan<T>(spec, H, W, dy.sizes[2], dy.sizes[3], channels_last(dx));
    T* out = dx.ptr<T>();
    const T* in = dy.ptr<T>();
    parallel_for(0, dx.numel(), kInterpolateGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const kernel::math::Pixel p = kernel::math::pixel_at(i, C, H, W, plan.channels_last);
        const T* plane = in + p.n * dy.strides[0] + p.c * dy.strides[1];
        const int64_t at = p.n * dx.strides[0] + p.c * dx.strides[1] + p.row * dx.strides[2] +
                           p.col * dx.strides[3];
        out[at] = kernel::math::interpolate_grad(plan, p.row, p.col, dy.strides[2], dy.strides[3],
                                         [plane](int64_t o) { return plane[o]; });
      }
    });
  });
}

}  // namespace loom::cpu
