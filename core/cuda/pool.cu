// File: core/cuda/pool.cu
// 2-D pooling kernels: a thread per output walks its window (forward), a thread
// per input element walks the windows that cover it (backward), so every element
// is written once and sums run in the CPU kernels' order (core/cpu/pool.cc).
// bfloat16 and float16 operands are read into float32, compared and summed
// there, and rounded once on store (element.cuh).
// N batch, C channels, H, W input plane, P, Q output plane.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cuda/copy_kernels.h"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/pool_kernels.h"
#include "core/cuda/view4.cuh"
#include "core/kernel/divider.h"

namespace loom::cuda {

namespace {

struct Position {
  int64_t n, c, h, w;
};

// The elements of one (N, C, rows, cols) operand, a thread each. Channels vary
// fastest when the operand is channels-last, so that neighbouring threads touch
// neighbouring addresses in either layout. Below 2^31 elements the index splits
// in 32 bits (kernel/divider.h): 64-bit divisions made a ResNet's global
// average-pool backward compute-bound, 79 us for 16 MB at batch 512 on an H200.
struct IndexSpace {
  int64_t count;
  int64_t C, rows, cols;
  bool channels_inner;
  bool narrow;
  kernel::math::Divider by_c, by_rows, by_cols;

  __device__ int64_t split(int64_t* i, int64_t size, kernel::math::Divider d) const {
    return kernel::math::split_index(i, size, d, narrow);
  }

  __device__ Position at(int64_t i) const {
    Position pos;
    if (channels_inner) {  // i is row-major over (N, rows, cols, C)
      pos.c = split(&i, C, by_c);
      pos.w = split(&i, cols, by_cols);
      pos.h = split(&i, rows, by_rows);
    } else {  // over (N, C, rows, cols)
      pos.w = split(&i, cols, by_cols);
      pos.h = split(&i, rows, by_rows);
      pos.c = split(&i, C, by_c);
    }
    pos.n = i;
    return pos;
  }
};

IndexSpace index_space(const Strided& t) {
  IndexSpace space{t.numel(), t.sizes[1], t.sizes[2], t.sizes[3], t.strides[1] < t.strides[3], false, {}, {}, {}};
  space.narrow = space.count < kernel::math::kNarrowIndexLimit;
  if (space.narrow && space.count > 0) {
    space.by_c = kernel::math::divider_for(space.C);
    space.by_rows = kernel::math::divider_for(space.rows);
    space.by_cols = kernel::math::divider_for(space.cols);
  }
  return space;
}

// The window geometry and both planes.
// `narrow`: a padded plane's coordinates are below 2^31, so that the backward
// divides them by the strides in 32 bits.
struct PoolShape {
  kernel::Pool2dParams params;
  int64_t H, W, P, Q;
  bool narrow;
  kernel::math::Divider by_stride_h, by_stride_w;
};

PoolShape pool_shape(const kernel::Pool2dParams& params, const Strided& in, const Strided& out) {
  PoolShape s{params, in.sizes[2], in.sizes[3], out.sizes[2], out.sizes[3], false, {}, {}};
  s.narrow = std::max(s.H + params.pad_h, s.W + params.pad_w) < kernel::math::kNarrowIndexLimit;
  if (s.narrow) {
    s.by_stride_h = kernel::math::divider_for(params.stride_h);
    s.by_stride_w = kernel::math::divider_for(params.stride_w);
  }
  return s;
}

// The input rows [h0, h1) and columns [w0, w1) of output (p, q)'s window, and its
// size clipped only to the padded extent (the count_include_pad divisor), as
// window_at in core/cpu/pool.cc.
struct Window {
  int64_t h0, h1, w0, w1;
  int64_t padded_count;

  __device__ int64_t divisor(bool count_include_pad) const {
    return count_include_pad ? padded_count : (h1 - h0) * (w1 - w0);
  }
};

__device__ Window window_at(const PoolShape& s, int64_t p, int64_t q) {
  const kernel::Pool2dParams& k = s.params;
  const int64_t h0 = p * k.stride_h - k.pad_h, w0 = q * k.stride_w - k.pad_w;
  const int64_t h1 = std::min(h0 + k.kernel_h, s.H + k.pad_h);
  const int64_t w1 = std::min(w0 + k.kernel_w, s.W + k.pad_w);
  return {std::max<int64_t>(h0, 0), std::min(h1, s.H), std::max<int64_t>(w0, 0),
          std::min(w1, s.W), (h1 - h0) * (w1 - w0)};
}

// The outputs [first, last) along one dim whose windows hold input i: those with
// o * stride - pad <= i < o * stride - pad + kernel, inside [0, out).
struct Span {
  int64_t first, last;
};

__device__ Span covering(int64_t i, int64_t kernel, int64_t stride, kernel::math::Divider by_stride, bool narrow,
                         int64_t pad, int64_t out) {
  auto over_stride = [&](int64_t n) -> int64_t {  // n >= 0
    return narrow ? kernel::math::divide(static_cast<uint32_t>(n), by_stride) : n / stride;
  };
  const int64_t shifted = i + pad;  // >= 0
  const int64_t first = shifted < kernel ? 0 : over_stride(shifted - kernel) + 1;
  return {first, std::min(over_stride(shifted) + 1, out)};
}

__device__ Span covering_rows(int64_t h, const PoolShape& s) {
  const kernel::Pool2dParams& k = s.params;
  return covering(h, k.kernel_h, k.stride_h, s.by_stride_h, s.narrow, k.pad_h, s.P);
}

__device__ Span covering_cols(int64_t w, const PoolShape& s) {
  const kernel::Pool2dParams& k = s.params;
  return covering(w, k.kernel_w, k.stride_w, s.by_stride_w, s.narrow, k.pad_w, s.Q);
}

// ---- max pooling ---------------------------------------------------------------

// The first max wins among ties; a NaN wins over numbers (the last NaN, as the CPU).
template <class S>
__global__ void max_pool_forward_kernel(View4<S> y, View4<int64_t> indices, View4<const S> x,
                                        IndexSpace outputs, PoolShape s) {
  using T = compute_t<S>;
  for (int64_t i = first_index(); i < outputs.count; i += index_step()) {
    const Position o = outputs.at(i);
    const Window win = window_at(s, o.h, o.w);
    T best = -std::numeric_limits<T>::infinity();
    int64_t best_index = win.h0 * s.W + win.w0;
    for (int64_t h = win.h0; h < win.h1; ++h) {
      for (int64_t w = win.w0; w < win.w1; ++w) {
        const T v = to_compute(x(o.n, o.c, h, w));
        if (v > best || isnan(v)) {
          best = v;
          best_index = h * s.W + w;
        }
      }
    }
    y(o.n, o.c, o.h, o.w) = from_compute<S>(best);
    indices(o.n, o.c, o.h, o.w) = best_index;
  }
}

// Indices must come from the forward with the same params: an index outside the
// window of its output is never looked at.
template <class S>
__global__ void max_pool_backward_kernel(View4<S> dx, View4<const S> dy,
                                         View4<const int64_t> indices, IndexSpace inputs,
                                         PoolShape s) {
  using T = compute_t<S>;
  for (int64_t i = first_index(); i < inputs.count; i += index_step()) {
    const Position e = inputs.at(i);
    const Span rows = covering_rows(e.h, s);
    const Span cols = covering_cols(e.w, s);
    const int64_t flat = e.h * s.W + e.w;
    T sum = T(0);
    for (int64_t p = rows.first; p < rows.last; ++p) {
      for (int64_t q = cols.first; q < cols.last; ++q) {
        if (indices(e.n, e.c, p, q) == flat) sum += to_compute(dy(e.n, e.c, p, q));
      }
    }
    dx(e.n, e.c, e.h, e.w) = from_compute<S>(sum);
  }
}

// dx must be zero. An index outside the (H, W) plane, which no forward writes,
// is skipped rather than followed out of bounds. (16-bit atomicAdd needs sm_80,
// the oldest architecture this library is built for.)
template <class S>
__global__ void max_pool_scatter_kernel(View4<S> dx, View4<const S> dy,
                                        View4<const int64_t> indices, IndexSpace outputs,
                                        int64_t H, int64_t W) {
  for (int64_t i = first_index(); i < outputs.count; i += index_step()) {
    const Position o = outputs.at(i);
    const int64_t index = indices(o.n, o.c, o.h, o.w);
    if (index < 0 || index >= H * W) continue;
    atomicAdd(&dx(o.n, o.c, index / W, index % W), dy(o.n, o.c, o.h, o.w));
  }
}

// ---- average pooling -----------------------------------------------------------

// The window sum in double, as the CPU, so float32 sums round once.
template <class S>
__global__ void avg_pool_forward_kernel(View4<S> y, View4<const S> x, IndexSpace outputs,
                                        PoolShape s, bool count_include_pad) {
  using T = compute_t<S>;
  for (int64_t i = first_index(); i < outputs.count; i += index_step()) {
    const Position o = outputs.at(i);
    const Window win = window_at(s, o.h, o.w);
    double sum = 0.0;
    for (int64_t h = win.h0; h < win.h1; ++h) {
      for (int64_t w = win.w0; w < win.w1; ++w) sum += to_compute(x(o.n, o.c, h, w));
    }
    const double divisor = static_cast<double>(win.divisor(count_include_pad));
    y(o.n, o.c, o.h, o.w) = from_compute<S>(static_cast<T>(sum / divisor));
  }
}

// Each covering window adds dy / divisor in T, in row-major (p, q) order, as the
// CPU's scatter reaches this element.
template <class S>
__global__ void avg_pool_backward_kernel(View4<S> dx, View4<const S> dy, IndexSpace inputs,
                                         PoolShape s, bool count_include_pad) {
  using T = compute_t<S>;
  for (int64_t i = first_index(); i < inputs.count; i += index_step()) {
    const Position e = inputs.at(i);
    const Span rows = covering_rows(e.h, s);
    const Span cols = covering_cols(e.w, s);
    T sum = T(0);
    for (int64_t p = rows.first; p < rows.last; ++p) {
      for (int64_t q = cols.first; q < cols.last; ++q) {
        const T divisor = static_cast<T>(window_at(s, p, q).divisor(count_include_pad));
        sum += to_compute(dy(e.n, e.c, p, q)) / divisor;
      }
    }
    dx(e.n, e.c, e.h, e.w) = from_compute<S>(sum);
  }
}

}  // namespace

cudaError_t launch_max_pool2d_forward(const Strided& y, const Strided& indices, const Strided& x,
                                      const kernel::Pool2dParams& params, cudaStream_t stream) {
  const IndexSpace outputs = index_space(y);
  if (outputs.count == 0) return cudaSuccess;
  visit_floating(x.dtype, [&]<class S>() {
    max_pool_forward_kernel<<<blocks_for(outputs.count), kThreads, 0, stream>>>(
        view4<S>(y), view4<int64_t>(indices), view4<const S>(x), outputs,
        pool_shape(params, x, y));
  });
  return cudaGetLastError();
}

cudaError_t launch_max_pool2d_backward(const Strided& dx, const Strided& dy,
                                       const Strided& indices, const kernel::Pool2dParams& params,
                                       cudaStream_t stream) {
  const IndexSpace inputs = index_space(dx);
  if (inputs.count == 0) return cudaSuccess;
  visit_floating(dx.dtype, [&]<class S>() {
    max_pool_backward_kernel<<<blocks_for(inputs.count), kThreads, 0, stream>>>(
        view4<S>(dx), view4<const S>(dy), view4<const int64_t>(indices), inputs,
        pool_shape(params, dx, dy));
  });
  return cudaGetLastError();
}

cudaError_t launch_max_pool2d_backward_scatter(const Strided& dx, const Strided& dy,
                                               const Strided& indices, cudaStream_t stream) {
  const cudaError_t zeroed = launch_fill(dx, 0.0, stream);
  if (zeroed != cudaSuccess) return zeroed;
  const IndexSpace outputs = index_space(dy);
  if (outputs.count == 0) return cudaSuccess;
  visit_floating(dx.dtype, [&]<class S>() {
    max_pool_scatter_kernel<<<blocks_for(outputs.count), kThreads, 0, stream>>>(
        view4<S>(dx), view4<const S>(dy), view4<const int64_t>(indices), outputs, dx.sizes[2],
        dx.sizes[3]);
  });
  return cudaGetLastError();
}

cudaError_t launch_avg_pool2d_forward(const Strided& y, const Strided& x,
                                      const kernel::Pool2dParams& params,
                                      cudaStream_t stream) {
  const IndexSpace outputs = index_space(y);
  if (outputs.count == 0) return cudaSuccess;
  visit_floating(x.dtype, [&]<class S>() {
    avg_pool_forward_kernel<<<blocks_for(outputs.count), kThreads, 0, stream>>>(
        view4<S>(y), view4<const S>(x), outputs, pool_shape(params, x, y), params.count_include_pad);
  });
  return cudaGetLastError();
}

cudaError_t launch_avg_pool2d_backward(const Strided& dx, const Strided& dy,
                                       const kernel::Pool2dParams& params,
                                       cudaStream_t stream) {
  const IndexSpace inputs = index_space(dx);
  if (inputs.count == 0) return cudaSuccess;
  visit_floating(dx.dtype, [&]<class S>() {
    avg_pool_backward_kernel<<<blocks_for(inputs.count), kThreads, 0, stream>>>(
        view4<S>(dx), view4<const S>(dy), inputs, pool_shape(params, dx, dy), params.count_include_pad);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
