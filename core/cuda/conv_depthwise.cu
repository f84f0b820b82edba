// File: core/cuda/conv_depthwise.cu
// Depthwise convolution kernels (conv_depthwise.h): the forward and the data
// gradient sum a K x K window per element; the weight gradient reduces over the
// pixels in two fixed-order stages. Where the channels-last operands move in
// 16-byte packs, a thread takes V channels of a pixel (the weight gradient's
// first stage for filters up to 3 x 3). Indices are 32-bit where every offset fits
// (divisions by the sizes are then cheap), else 64-bit; the filter side K is a
// template parameter so the window loops unroll and the weight gradient's K * K
// sums live in registers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "core/cuda/conv_depthwise_kernels.h"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"

namespace loom::cuda {

namespace {

// The geometry every kernel reads: sizes, the convolution's parameters, and
// the strides of the input-side operand (x or dx), the output-side operand
// (y or dy) and the filter.
struct DepthwiseArgs {
  int64_t N, C, H, W, P, Q;
  int stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t in[4], out[4], filter[4];
  bool channels_innermost;  // of the operand a thread per element walks
};

DepthwiseArgs depthwise_args(const Strided& in, const Strided& out, const Strided& filter,
                             const kernel::ConvParams& p, const Strided& walked) {
  DepthwiseArgs a{};
  a.N = in.sizes[0], a.C = in.sizes[1], a.H = in.sizes[2], a.W = in.sizes[3];
  a.P = out.sizes[2], a.Q = out.sizes[3];
  a.stride_h = p.stride_h, a.stride_w = p.stride_w, a.pad_h = p.pad_h, a.pad_w = p.pad_w;
  a.dilation_h = p.dilation_h, a.dilation_w = p.dilation_w;
  for (int d = 0; d < 4; ++d) {
    a.in[d] = in.strides[d];
    a.out[d] = out.strides[d];
    a.filter[d] = filter.strides[d];
  }
  a.channels_innermost = walked.sizes[1] > 1 && walked.strides[1] == 1;
  return a;
}

template <class I>
struct Pixel {
  I n, c, h, w;
};

// Element i of an (N, C, H, W) operand in its memory order: channels innermost
// for channels-last, columns innermost otherwise.
template <class I>
__device__ Pixel<I> pixel_of(I i, I C, I H, I W, bool channels_innermost) {
  Pixel<I> at;
  if (channels_innermost) {
    at.c = i % C, i /= C;
    at.w = i % W, i /= W;
    at.h = i % H, at.n = i / H;
  } else {
    at.w = i % W, i /= W;
    at.h = i % H, i /= H;
    at.c = i % C, at.n = i / C;
  }
  return at;
}

template <class I>
__device__ I offset(const int64_t (&strides)[4], I n, I c, I h, I w) {
  return n * I(strides[0]) + c * I(strides[1]) + h * I(strides[2]) + w * I(strides[3]);
}

template <class S, class I, int K>
__global__ void depthwise_forward_kernel(S* y, const S* x, const S* w, DepthwiseArgs a, I total) {
  using A = compute_t<S>;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    const Pixel<I> o = pixel_of<I>(i, a.C, a.P, a.Q, a.channels_innermost);
    const S* xc = x + o.n * I(a.in[0]) + o.c * I(a.in[1]);
    const S* wc = w + o.c * I(a.filter[0]);
    const I h0 = o.h * a.stride_h - a.pad_h, w0 = o.w * a.stride_w - a.pad_w;
    A acc = 0;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const I h = h0 + r * a.dilation_h;
      if (h < 0 || h >= I(a.H)) continue;
#pragma unroll
      for (int s = 0; s < K; ++s) {
        const I col = w0 + s * a.dilation_w;
        if (col < 0 || col >= I(a.W)) continue;
        acc += to_compute(xc[h * I(a.in[2]) + col * I(a.in[3])]) *
               to_compute(wc[r * I(a.filter[2]) + s * I(a.filter[3])]);
      }
    }
    y[offset<I>(a.out, o.n, o.c, o.h, o.w)] = from_compute<S>(acc);
  }
}

// dx[n, c, h, w] sums dy[n, c, p, q] * w[c, r, s] over the taps with
// h = p * stride - pad + r * dilation (and likewise for w, q, s).
template <class S, class I, int K>
__global__ void depthwise_dgrad_kernel(S* dx, const S* dy, const S* w, DepthwiseArgs a, I total) {
  using A = compute_t<S>;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    const Pixel<I> at = pixel_of<I>(i, a.C, a.H, a.W, a.channels_innermost);
    const S* dyc = dy + at.n * I(a.out[0]) + at.c * I(a.out[1]);
    const S* wc = w + at.c * I(a.filter[0]);
    A acc = 0;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const I t = at.h + a.pad_h - r * a.dilation_h;
      if (t < 0 || t % a.stride_h != 0 || t / a.stride_h >= I(a.P)) continue;
      const I p = t / a.stride_h;
#pragma unroll
      for (int s = 0; s < K; ++s) {
        const I u = at.w + a.pad_w - s * a.dilation_w;
        if (u < 0 || u % a.stride_w != 0 || u / a.stride_w >= I(a.Q)) continue;
        acc += to_compute(dyc[p * I(a.out[2]) + (u / a.stride_w) * I(a.out[3])]) *
               to_compute(wc[r * I(a.filter[2]) + s * I(a.filter[3])]);
      }
    }
    dx[offset<I>(a.in, at.n, at.c, at.h, at.w)] = from_compute<S>(acc);
  }
}

// The channels-last forms of the two kernels above, where every operand's
// channels move in packs (channel_packs_fit): a thread computes V channels of
// one pixel with one 16-byte access per tap, which cuts the load instructions
// and the index arithmetic by V. Each element sums the same taps in the same
// order as above. i walks (n, p, q, channel pack) with the packs innermost.
template <class S, class I, int K, int V>
__global__ void depthwise_forward_packed_kernel(S* y, const S* x, const S* w, DepthwiseArgs a, I total) {
  using A = compute_t<S>;
  const I packs = I(a.C) / V;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    const I c = (i % packs) * V, pixel = i / packs;
    const I q = pixel % I(a.Q), np = pixel / I(a.Q);
    const I p = np % I(a.P), n = np / I(a.P);
    const S* xc = x + n * I(a.in[0]) + c;
    const S* wc = w + c * I(a.filter[0]);
    const I h0 = p * a.stride_h - a.pad_h, w0 = q * a.stride_w - a.pad_w;
    A acc[V] = {};
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const I h = h0 + r * a.dilation_h;
      if (h < 0 || h >= I(a.H)) continue;
#pragma unroll
      for (int s = 0; s < K; ++s) {
        const I col = w0 + s * a.dilation_w;
        if (col < 0 || col >= I(a.W)) continue;
        const Pack<S, V> in = load_pack<V>(xc + h * I(a.in[2]) + col * I(a.in[3]));
        const S* tap = wc + r * I(a.filter[2]) + s * I(a.filter[3]);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] += to_compute(in.v[v]) * to_compute(tap[v * I(a.filter[0])]);
      }
    }
    Pack<S, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[v] = from_compute<S>(acc[v]);
    store_pack(y + offset<I>(a.out, n, c, p, q), out);
  }
}

template <class S, class I, int K, int V>
__global__ void depthwise_dgrad_packed_kernel(S* dx, const S* dy, const S* w, DepthwiseArgs a, I total) {
  using A = compute_t<S>;
  const I packs = I(a.C) / V;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    const I c = (i % packs) * V, pixel = i / packs;
    const I col = pixel % I(a.W), nh = pixel / I(a.W);
    const I h = nh % I(a.H), n = nh / I(a.H);
    const S* dyc = dy + n * I(a.out[0]) + c;
    const S* wc = w + c * I(a.filter[0]);
    A acc[V] = {};
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const I t = h + a.pad_h - r * a.dilation_h;
      if (t < 0 || t % a.stride_h != 0 || t / a.stride_h >= I(a.P)) continue;
      const I p = t / a.stride_h;
#pragma unroll
      for (int s = 0; s < K; ++s) {
        const I u = col + a.pad_w - s * a.dilation_w;
        if (u < 0 || u % a.stride_w != 0 || u / a.stride_w >= I(a.Q)) continue;
        const Pack<S, V> g = load_pack<V>(dyc + p * I(a.out[2]) + (u / a.stride_w) * I(a.out[3]));
        const S* tap = wc + r * I(a.filter[2]) + s * I(a.filter[3]);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] += to_compute(g.v[v]) * to_compute(tap[v * I(a.filter[0])]);
      }
    }
    Pack<S, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[v] = from_compute<S>(acc[v]);
    store_pack(dx + offset<I>(a.in, n, c, h, col), out);
  }
}

// Stage 1 of the weight gradient: block (tile, chunk) sums dy * x over its
// chunk's pixels for `tile` channels; each thread takes every rows-th pixel of
// the chunk, then the block adds its rows pairwise in a fixed order.
template <class S, class I, int K>
__global__ void depthwise_wgrad_partial_kernel(compute_t<S>* partial, const S* dy, const S* x,
                                               DepthwiseArgs a, I pixels, I per_chunk, int tile) {
  using A = compute_t<S>;
  constexpr int kTaps = K * K;
  const int lane = threadIdx.x % tile, row = threadIdx.x / tile, rows = blockDim.x / tile;
  const I c = I(blockIdx.x) * tile + lane;
  const I begin = I(blockIdx.y) * per_chunk;
  const I end = begin + per_chunk < pixels ? begin + per_chunk : pixels;
  A acc[kTaps];
#pragma unroll
  for (int t = 0; t < kTaps; ++t) acc[t] = 0;
  if (c < I(a.C)) {
    for (I pixel = begin + row; pixel < end; pixel += rows) {
      const I q = pixel % I(a.Q), np = pixel / I(a.Q);
      const I p = np % I(a.P), n = np / I(a.P);
      const A g = to_compute(dy[offset<I>(a.out, n, c, p, q)]);
      const S* xc = x + n * I(a.in[0]) + c * I(a.in[1]);
      const I h0 = p * a.stride_h - a.pad_h, w0 = q * a.stride_w - a.pad_w;
#pragma unroll
      for (int r = 0; r < K; ++r) {
        const I h = h0 + r * a.dilation_h;
        const bool inside = h >= 0 && h < I(a.H);
#pragma unroll
        for (int s = 0; s < K; ++s) {
          const I col = w0 + s * a.dilation_w;
          if (inside && col >= 0 && col < I(a.W)) {
            acc[r * K + s] += g * to_compute(xc[h * I(a.in[2]) + col * I(a.in[3])]);
          }
        }
      }
    }
  }
  __shared__ A sums[kThreads];
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
    sums[threadIdx.x] = acc[t];
    __syncthreads();
    for (int half = rows / 2; half > 0; half /= 2) {
      if (row < half) sums[threadIdx.x] += sums[threadIdx.x + half * tile];
      __syncthreads();
    }
    if (row == 0 && c < I(a.C)) partial[(int64_t(blockIdx.y) * a.C + c) * kTaps + t] = sums[lane];
    __syncthreads();
  }
}

// Stage 1 on channels-last operands whose channels move in packs: a lane owns V
// channels (tile lanes = tile * V channels per block), reads one 16-byte pack of
// dy and of x per tap, and the block adds its rows pairwise in a fixed order as above.
template <class S, class I, int K, int V>
__global__ void depthwise_wgrad_partial_packed_kernel(compute_t<S>* partial, const S* dy, const S* x,
                                                      DepthwiseArgs a, I pixels, I per_chunk, int tile) {
  using A = compute_t<S>;
  constexpr int kTaps = K * K;
  const int lane = threadIdx.x % tile, row = threadIdx.x / tile, rows = blockDim.x / tile;
  const I c = (I(blockIdx.x) * tile + lane) * V;
  const I begin = I(blockIdx.y) * per_chunk;
  const I end = begin + per_chunk < pixels ? begin + per_chunk : pixels;
  A acc[kTaps][V] = {};
  if (c < I(a.C)) {
    for (I pixel = begin + row; pixel < end; pixel += rows) {
      const I q = pixel % I(a.Q), np = pixel / I(a.Q);
      const I p = np % I(a.P), n = np / I(a.P);
      const Pack<S, V> g = load_pack<V>(dy + offset<I>(a.out, n, c, p, q));
      const S* xc = x + n * I(a.in[0]) + c;
      const I h0 = p * a.stride_h - a.pad_h, w0 = q * a.stride_w - a.pad_w;
#pragma unroll
      for (int r = 0; r < K; ++r) {
        const I h = h0 + r * a.dilation_h;
        const bool inside = h >= 0 && h < I(a.H);
#pragma unroll
        for (int s = 0; s < K; ++s) {
          const I col = w0 + s * a.dilation_w;
          if (!inside || col < 0 || col >= I(a.W)) continue;
          const Pack<S, V> in = load_pack<V>(xc + h * I(a.in[2]) + col * I(a.in[3]));
#pragma unroll
          for (int v = 0; v < V; ++v) acc[r * K + s][v] += to_compute(g.v[v]) * to_compute(in.v[v]);
        }
      }
    }
  }
  __shared__ A sums[kThreads * V];
  A* mine = sums + threadIdx.x * V;
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
#pragma unroll
    for (int v = 0; v < V; ++v) mine[v] = acc[t][v];
    __syncthreads();
    for (int half = rows / 2; half > 0; half /= 2) {
      if (row < half) {
#pragma unroll
        for (int v = 0; v < V; ++v) mine[v] += mine[half * tile * V + v];
      }
      __syncthreads();
    }
    if (row == 0 && c < I(a.C)) {
#pragma unroll
      for (int v = 0; v < V; ++v) partial[(int64_t(blockIdx.y) * a.C + c + v) * kTaps + t] = mine[v];
    }
    __syncthreads();
  }
}

// Stage 2: dw[c, 0, r, s] = the chunks' partial sums, added in chunk order.
template <class S>
__global__ void depthwise_wgrad_finalize_kernel(S* dw, const compute_t<S>* partial, DepthwiseArgs a,
                                                int K, int64_t chunks) {
  using A = compute_t<S>;
  const int64_t taps = int64_t(K) * K, total = a.C * taps;
  for (int64_t i = first_index(); i < total; i += index_step()) {
    const int64_t c = i / taps, t = i % taps;
    A sum = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partial[chunk * total + i];
    dw[c * a.filter[0] + (t / K) * a.filter[2] + (t % K) * a.filter[3]] = from_compute<S>(sum);
  }
}

// The largest element offset of t plus one.
int64_t extent(const Strided& t) {
  int64_t last = 0;
  for (size_t d = 0; d < t.sizes.size(); ++d) last += (t.sizes[d] - 1) * t.strides[d];
  return last + 1;
}

// 32-bit indices when every operand's offsets, the element count and a
// grid-stride step past it stay below 2^31.
bool fits_int32(int64_t total, const Strided& a, const Strided& b, const Strided& c) {
  constexpr int64_t kLimit = int64_t(1) << 30;
  return total < kLimit && extent(a) < kLimit && extent(b) < kLimit && extent(c) < kLimit;
}

// fn.template operator()<I, K>() for the index type and the filter side.
template <class Fn>
void visit_index_and_side(bool narrow, int64_t side, Fn&& fn) {
  auto with_side = [&]<class I>() {
    switch (side) {
      case 1: return fn.template operator()<I, 1>();
      case 3: return fn.template operator()<I, 3>();
      case 5: return fn.template operator()<I, 5>();
      default: return fn.template operator()<I, 7>();
    }
  };
  if (narrow) {
    with_side.template operator()<int32_t>();
  } else {
    with_side.template operator()<int64_t>();
  }
}

}  // namespace

cudaError_t launch_conv_depthwise_forward(const Strided& y, const Strided& x, const Strided& w,
                                          const kernel::ConvParams& p, cudaStream_t stream) {
  const int64_t total = y.numel();
  if (total == 0) return cudaSuccess;
  const DepthwiseArgs a = depthwise_args(x, y, w, p, y);
  visit_floating(y.dtype, [&]<class S>() {
    constexpr int V = kPackOf<S>;
    const bool packed = channel_packs_fit(x, V) && channel_packs_fit(y, V);
    visit_index_and_side(fits_int32(total, x, y, w), w.sizes[2], [&]<class I, int K>() {
      if (packed) {
        depthwise_forward_packed_kernel<S, I, K, V><<<blocks_for(total / V), kThreads, 0, stream>>>(
            y.ptr<S>(), x.ptr<const S>(), w.ptr<const S>(), a, I(total / V));
      } else {
        depthwise_forward_kernel<S, I, K><<<blocks_for(total), kThreads, 0, stream>>>(
            y.ptr<S>(), x.ptr<const S>(), w.ptr<const S>(), a, I(total));
      }
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_conv_depthwise_dgrad(const Strided& dx, const Strided& dy, const Strided& w,
                                        const kernel::ConvParams& p, cudaStream_t stream) {
  const int64_t total = dx.numel();
  if (total == 0) return cudaSuccess;
  const DepthwiseArgs a = depthwise_args(dx, dy, w, p, dx);
  visit_floating(dx.dtype, [&]<class S>() {
    constexpr int V = kPackOf<S>;
    const bool packed = channel_packs_fit(dx, V) && channel_packs_fit(dy, V);
    visit_index_and_side(fits_int32(total, dx, dy, w), w.sizes[2], [&]<class I, int K>() {
      if (packed) {
        depthwise_dgrad_packed_kernel<S, I, K, V><<<blocks_for(total / V), kThreads, 0, stream>>>(
            dx.ptr<S>(), dy.ptr<const S>(), w.ptr<const S>(), a, I(total / V));
      } else {
        depthwise_dgrad_kernel<S, I, K><<<blocks_for(total), kThreads, 0, stream>>>(
            dx.ptr<S>(), dy.ptr<const S>(), w.ptr<const S>(), a, I(total));
      }
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_conv_depthwise_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                                        const kernel::ConvParams& p, const Strided& scratch,
                                        cudaStream_t stream) {
  const DepthwiseArgs a = depthwise_args(x, dy, dw, p, dy);
  const int64_t pixels = a.N * a.P * a.Q;
  visit_floating(dw.dtype, [&]<class S>() {
    using A = compute_t<S>;
    constexpr int V = kPackOf<S>;
    // Packs for filters up to 3 x 3 (K * K * V accumulators per thread stay in registers).
    const bool packed = dw.sizes[2] <= 3 && channel_packs_fit(x, V) && channel_packs_fit(dy, V);
    const DepthwiseSplit split = packed ? depthwise_wgrad_packed_split(a.C, V, pixels)
                                        : depthwise_wgrad_split(a.C, pixels, a.channels_innermost);
    const int64_t per_chunk = (pixels + split.chunks - 1) / split.chunks;
    const int64_t lanes = packed ? a.C / V : a.C;
    const dim3 grid(static_cast<unsigned>((lanes + split.tile - 1) / split.tile), static_cast<unsigned>(split.chunks));
    if (pixels > 0) {
      visit_index_and_side(fits_int32(pixels, x, dy, dw), dw.sizes[2], [&]<class I, int K>() {
        if constexpr (K <= 3) {
          if (packed) {
            depthwise_wgrad_partial_packed_kernel<S, I, K, V><<<grid, kThreads, 0, stream>>>(
                scratch.ptr<A>(), dy.ptr<const S>(), x.ptr<const S>(), a, I(pixels), I(per_chunk), split.tile);
            return;
          }
        }
        depthwise_wgrad_partial_kernel<S, I, K><<<grid, kThreads, 0, stream>>>(
            scratch.ptr<A>(), dy.ptr<const S>(), x.ptr<const S>(), a, I(pixels), I(per_chunk), split.tile);
      });
    }
    const int64_t outputs = a.C * dw.sizes[2] * dw.sizes[3];
    depthwise_wgrad_finalize_kernel<S><<<blocks_for(outputs), kThreads, 0, stream>>>(
        dw.ptr<S>(), scratch.ptr<const A>(), a, static_cast<int>(dw.sizes[2]),
        pixels > 0 ? split.chunks : 0);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
