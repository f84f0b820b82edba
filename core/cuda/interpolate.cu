// File: core/cuda/interpolate.cu
// Resampling kernels: a grid-stride loop over the pixels of the tensor written
// (y forward, dx backward) in its memory order, so that neighbouring threads
// write neighbouring elements in NCHW and channels-last alike. What a pixel
// reads, and what an input pixel's gradient gathers, is the CPU's own code
// (core/kernel/interpolate.h).
//
// N batch, C channels, H, W input plane, P, Q output plane.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/interpolate_kernels.h"
#include "core/cuda/view4.cuh"
#include "core/kernel/interpolate.h"

namespace loom::cuda {

namespace {

using kernel::math::InterpolatePlan;

template <class S>
__global__ void interpolate_kernel(View4<S> y, View4<const S> x, InterpolatePlan<compute_t<S>> plan,
                                   int64_t C, int64_t P, int64_t Q, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const kernel::math::Pixel p = kernel::math::pixel_at(i, C, P, Q, plan.channels_last);
    const S* plane = x.at(p.n, p.c, 0, 0);
    auto load = [plane](int64_t o) { return to_compute(plane[o]); };
    y(p.n, p.c, p.row, p.col) = from_compute<S>(
        kernel::math::interpolate_value(plan, p.row, p.col, x.stride_h, x.stride_w, load));
  }
}

template <class S>
__global__ void interpolate_backward_kernel(View4<S> dx, View4<const S> dy,
                                            InterpolatePlan<compute_t<S>> plan, int64_t C,
                                            int64_t H, int64_t W, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const kernel::math::Pixel p = kernel::math::pixel_at(i, C, H, W, plan.channels_last);
    const S* plane = dy.at(p.n, p.c, 0, 0);
    auto load = [plane](int64_t o) { return to_compute(plane[o]); };
    dx(p.n, p.c, p.row, p.col) = from_compute<S>(
        kernel::math::interpolate_grad(plan, p.row, p.col, dy.stride_h, dy.stride_w, load));
  }
}

bool channels_last(const Strided& t) { return t.strides[1] < t.strides[3]; }

}  // namespace

cudaError_t launch_interpolate(const Strided& y, const Strided& x, const kernel::InterpolateSpec& spec,
                               cudaStream_t stream) {
  const int64_t n = y.numel();
  if (n == 0) return cudaSuccess;
  visit_floating(y.dtype, [&]<class S>() {
    const auto plan = kernel::math::interpolate_plan<compute_t<S>>(
        spec, x.sizes[2], x.sizes[3], y.sizes[2], y.sizes[3], channels_last(y));
    interpolate_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        view4<S>(y), view4<const S>(x), plan, y.sizes[1], y.sizes[2], y.sizes[3], n);
  });
  return cudaGetLastError();
}

cudaError_t launch_interpolate_backward(const Strided& dx, const Strided& dy,
                                        const kernel::InterpolateSpec& spec, cudaStream_t stream) {
  const int64_t n = dx.numel();
  if (n == 0) return cudaSuccess;
  visit_floating(dx.dtype, [&]<class S>() {
    const auto plan = kernel::math::interpolate_plan<compute_t<S>>(
        spec, dx.sizes[2], dx.sizes[3], dy.sizes[2], dy.sizes[3], channels_last(dx));
    interpolate_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        view4<S>(dx), view4<const S>(dy), plan, dx.sizes[1], dx.sizes[2], dx.sizes[3], n);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
