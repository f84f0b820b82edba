// File: core/cuda/conv_small.cu
// Small-channel direct convolution (conv_small.h). The filter (at most 2048
// weights) sits in shared memory as float32 [C * R * S][K]. A thread owns KB
// consecutive output channels (8, 4, 2 or 1: the largest that divides K), so
// each input value it loads feeds KB fused multiply-adds.
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include <cstdint>

#include "core/cuda/conv_small_kernels.h"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/view4.cuh"

namespace loom::cuda {

namespace {

// Pixels per shared-memory tile of the weight gradient, and its block budget.
constexpr int kTilePixels = 32;
constexpr int64_t kMaxPartialBlocks = 1024, kMinPixelsPerBlock = 256;
constexpr int kMaxForwardBlocks = 2048;
constexpr int64_t kMaxSharedBytes = 48 * 1024;  // without opting in to more

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Every size fits 32 bits (a plane or channel count); offsets are 64-bit.
struct ConvGeo {
  int N, C, H, W, K, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w;

  __host__ __device__ int crs() const { return C * R * S; }
};

ConvGeo conv_geo(const Strided& x, const Strided& w, const Strided& y, const cpu::ConvParams& p) {
  return {static_cast<int>(x.sizes[0]), static_cast<int>(x.sizes[1]), static_cast<int>(x.sizes[2]),
          static_cast<int>(x.sizes[3]), static_cast<int>(w.sizes[0]), static_cast<int>(w.sizes[2]),
          static_cast<int>(w.sizes[3]), static_cast<int>(y.sizes[2]), static_cast<int>(y.sizes[3]),
          static_cast<int>(p.stride_h), static_cast<int>(p.stride_w), static_cast<int>(p.pad_h),
          static_cast<int>(p.pad_w)};
}

// The largest of 8, 4, 2, 1 that divides K.
int channels_per_thread(int64_t K) { return K % 8 == 0 ? 8 : K % 4 == 0 ? 4 : K % 2 == 0 ? 2 : 1; }

// KB consecutive floats of shared memory (16-byte loads where KB allows).
template <int KB>
__device__ void load_row(float (&out)[KB], const float* row) {
  if constexpr (KB % 4 == 0) {
#pragma unroll
    for (int j = 0; j < KB; j += 4) {
      const float4 v = *reinterpret_cast<const float4*>(row + j);
      out[j] = v.x, out[j + 1] = v.y, out[j + 2] = v.z, out[j + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < KB; ++j) out[j] = row[j];
  }
}

// w (K, C, R, S), any strides -> filter[crs * K + k] in float32.
template <class S>
__device__ void stage_filter(float* filter, View4<const S> w, const ConvGeo& g) {
  const int crs_count = g.crs();
  for (int i = threadIdx.x; i < crs_count * g.K; i += blockDim.x) {
    const int k = i / crs_count, crs = i % crs_count;
    const int c = crs / (g.R * g.S), r = crs / g.S % g.R, s = crs % g.S;
    filter[crs * g.K + k] = to_compute(w(k, c, r, s));
  }
}

struct OutputItem {
  int64_t n;
  int p, q, kg;
};

// Item i's pixel and channel group; 32-bit division where i fits (a fraction of 64-bit's cost).
template <class I>
__device__ OutputItem split_item(I i, const ConvGeo& g, int groups, bool channels_inner) {
  OutputItem it;
  if (channels_inner) {
    it.kg = static_cast<int>(i % groups);
    i /= groups;
    it.q = static_cast<int>(i % g.Q);
    i /= g.Q;
    it.p = static_cast<int>(i % g.P);
    it.n = static_cast<int64_t>(i / g.P);
  } else {
    it.q = static_cast<int>(i % g.Q);
    i /= g.Q;
    it.p = static_cast<int>(i % g.P);
    i /= g.P;
    it.kg = static_cast<int>(i % groups);
    it.n = static_cast<int64_t>(i / groups);
  }
  return it;
}

// One item: KB channels of one output pixel. Channels-last y numbers the
// channel groups fastest (neighbouring threads write neighbouring channels and
// read one input value); NCHW y numbers the pixels fastest.
template <class S, int KB>
__global__ void small_forward_kernel(View4<S> y, View4<const S> x, View4<const S> w, ConvGeo g,
                                     bool channels_inner, bool packed_store) {
  extern __shared__ float filter[];
  stage_filter(filter, w, g);
  __syncthreads();
  const int groups = g.K / KB;
  const int64_t items = int64_t(g.N) * g.P * g.Q * groups;
  const bool narrow = items <= int64_t(UINT32_MAX);
  for (int64_t i = first_index(); i < items; i += index_step()) {
    const OutputItem it = narrow ? split_item(static_cast<uint32_t>(i), g, groups, channels_inner)
                                 : split_item(i, g, groups, channels_inner);
    const int64_t n = it.n;
    const int p = it.p, q = it.q, kg = it.kg;
    float acc[KB];
#pragma unroll
    for (int j = 0; j < KB; ++j) acc[j] = 0.0f;
    const int h0 = p * g.stride_h - g.pad_h, w0 = q * g.stride_w - g.pad_w;
    for (int c = 0; c < g.C; ++c) {
      for (int r = 0; r < g.R; ++r) {
        const int h = h0 + r;
        if (h < 0 || h >= g.H) continue;
        for (int s = 0; s < g.S; ++s) {
          const int col = w0 + s;
          if (col < 0 || col >= g.W) continue;
          const float xv = to_compute(x(n, c, h, col));
          float wv[KB];
          load_row<KB>(wv, filter + ((c * g.R + r) * g.S + s) * g.K + kg * KB);
#pragma unroll
          for (int j = 0; j < KB; ++j) acc[j] = fmaf(xv, wv[j], acc[j]);
        }
      }
    }
    if (packed_store) {
      Pack<S, KB> out;
#pragma unroll
      for (int j = 0; j < KB; ++j) out.v[j] = from_compute<S>(acc[j]);
      *reinterpret_cast<Pack<S, KB>*>(&y(n, kg * KB, p, q)) = out;
    } else {
#pragma unroll
      for (int j = 0; j < KB; ++j) y(n, kg * KB + j, p, q) = from_compute<S>(acc[j]);
    }
  }
}

// Stage 1: block b sums pixels [b * per_block, (b + 1) * per_block) of the
// N * P * Q pixels, tile by tile in pixel order, into partials[k][crs][b].
// Thread t owns filter element crs = t % CRS and channels (t / CRS) * KJ + j.
template <class S, int KJ>
__global__ void small_wgrad_partial_kernel(View4<const S> dy, View4<const S> x, ConvGeo g,
                                           int64_t per_block, float* partials) {
  extern __shared__ float tile[];
  const int crs_count = g.crs();
  float* dy_tile = tile;                             // [kTilePixels][K]
  float* x_tile = tile + kTilePixels * g.K;          // [kTilePixels][CRS]
  const bool active = threadIdx.x < crs_count * (g.K / KJ);
  const int crs = threadIdx.x % crs_count, kg = threadIdx.x / crs_count;
  const int64_t pixels = int64_t(g.N) * g.P * g.Q;
  const int64_t begin = blockIdx.x * per_block;
  const int64_t end = begin + per_block < pixels ? begin + per_block : pixels;
  float acc[KJ];
#pragma unroll
  for (int j = 0; j < KJ; ++j) acc[j] = 0.0f;
  __shared__ int64_t tile_n[kTilePixels];
  __shared__ int tile_p[kTilePixels], tile_q[kTilePixels];
  for (int64_t base = begin; base < end; base += kTilePixels) {
    const int count = static_cast<int>(end - base < kTilePixels ? end - base : kTilePixels);
    if (threadIdx.x < count) {  // each tile pixel's (n, p, q), split once
      const int64_t pixel = base + threadIdx.x;
      tile_q[threadIdx.x] = static_cast<int>(pixel % g.Q);
      tile_p[threadIdx.x] = static_cast<int>(pixel / g.Q % g.P);
      tile_n[threadIdx.x] = pixel / (int64_t(g.P) * g.Q);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < count * g.K; i += blockDim.x) {
      const int t = i / g.K, k = i % g.K;
      dy_tile[t * g.K + k] = to_compute(dy(tile_n[t], k, tile_p[t], tile_q[t]));
    }
    for (int i = threadIdx.x; i < count * crs_count; i += blockDim.x) {
      const int t = i / crs_count, e = i % crs_count;
      const int c = e / (g.R * g.S), r = e / g.S % g.R, s = e % g.S;
      const int h = tile_p[t] * g.stride_h - g.pad_h + r, col = tile_q[t] * g.stride_w - g.pad_w + s;
      const bool inside = h >= 0 && h < g.H && col >= 0 && col < g.W;
      x_tile[t * crs_count + e] = inside ? to_compute(x(tile_n[t], c, h, col)) : 0.0f;
    }
    __syncthreads();
    if (active) {
      for (int t = 0; t < count; ++t) {
        const float xv = x_tile[t * crs_count + crs];
        float gv[KJ];
        load_row<KJ>(gv, dy_tile + t * g.K + kg * KJ);
#pragma unroll
        for (int j = 0; j < KJ; ++j) acc[j] = fmaf(gv[j], xv, acc[j]);
      }
    }
    __syncthreads();
  }
  if (active) {  // partials is [K * CRS][blocks], for stage 2's coalesced reads
#pragma unroll
    for (int j = 0; j < KJ; ++j) {
      partials[(int64_t(kg * KJ + j) * crs_count + crs) * gridDim.x + blockIdx.x] = acc[j];
    }
  }
}

// Stage 2: a warp per dw[k][crs]. Lane l sums the partials of blocks l, l + 32,
// ... in order, then the lanes combine in a fixed shuffle tree: the same
// order every run.
template <class S>
__global__ void small_wgrad_sum_kernel(View4<S> dw, const float* partials, int64_t blocks,
                                       ConvGeo g) {
  const int crs_count = g.crs();
  const int64_t outputs = int64_t(g.K) * crs_count;
  const int lane = threadIdx.x % 32;
  for (int64_t o = first_index() / 32; o < outputs; o += index_step() / 32) {
    const float* row = partials + o * blocks;  // [output][block]
    float sum = 0.0f;
    for (int64_t b = lane; b < blocks; b += 32) sum += row[b];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) {
      const int k = static_cast<int>(o / crs_count), e = static_cast<int>(o % crs_count);
      dw(k, e / (g.R * g.S), e / g.S % g.R, e % g.S) = from_compute<S>(sum);
    }
  }
}

int64_t partial_blocks(int64_t pixels) {
  const int64_t wanted = (pixels + kMinPixelsPerBlock - 1) / kMinPixelsPerBlock;
  return wanted < 1 ? 1 : wanted > kMaxPartialBlocks ? kMaxPartialBlocks : wanted;
}

// Pixels per block: whole tiles, so that block b's range is fixed by the shape alone.
int64_t pixels_per_block(int64_t pixels) {
  const int64_t blocks = partial_blocks(pixels);
  const int64_t per = (pixels + blocks - 1) / blocks;
  return (per + kTilePixels - 1) / kTilePixels * kTilePixels;
}

// y's KB channels of a pixel can be stored as one aligned pack.
template <class S>
bool packs_fit(const Strided& y, int KB) {
  const int64_t bytes = KB * static_cast<int64_t>(sizeof(S));
  return y.strides[1] == 1 && y.strides[0] % KB == 0 && y.strides[2] % KB == 0 &&
         y.strides[3] % KB == 0 && reinterpret_cast<uintptr_t>(y.data) % bytes == 0;
}

// fn.template operator()<KB>() for KB in {8, 4, 2, 1}.
template <class Fn>
void visit_channels(int KB, Fn&& fn) {
  switch (KB) {
    case 8: return fn.template operator()<8>();
    case 4: return fn.template operator()<4>();
    case 2: return fn.template operator()<2>();
    default: return fn.template operator()<1>();
  }
}

// float32, bfloat16 or float16 (conv_small_supported admits no other dtype).
template <class Fn>
void visit_small(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::BFloat16: return fn.template operator()<__nv_bfloat16>();
    case DType::Float16: return fn.template operator()<__half>();
    default: return fn.template operator()<float>();
  }
}

}  // namespace

cudaError_t launch_conv_small_forward(const Strided& y, const Strided& x, const Strided& w,
                                      const cpu::ConvParams& p, cudaStream_t stream) {
  if (y.numel() == 0) return cudaSuccess;
  const ConvGeo g = conv_geo(x, w, y, p);
  const int KB = channels_per_thread(g.K);
  const bool channels_inner = y.strides[1] < y.strides[3];
  const int64_t items = y.numel() / KB;
  const int blocks = std::min(blocks_for(items), kMaxForwardBlocks);
  const size_t shared = sizeof(float) * g.crs() * g.K;
  visit_small(x.dtype, [&]<class S>() {
    const bool packed = channels_inner && packs_fit<S>(y, KB);
    visit_channels(KB, [&]<int V>() {
      small_forward_kernel<S, V><<<blocks, kThreads, shared, stream>>>(
          view4<S>(y), view4<const S>(x), view4<const S>(w), g, channels_inner, packed);
    });
  });
  return cudaGetLastError();
}

bool conv_small_fits(int64_t K, int64_t taps) {
  const int64_t threads = taps * (K / channels_per_thread(K));
  const int64_t tile_bytes = sizeof(float) * kTilePixels * (K + taps);
  const int64_t filter_bytes = sizeof(float) * K * taps;
  return threads <= kThreads && tile_bytes <= kMaxSharedBytes && filter_bytes <= kMaxSharedBytes;
}

int64_t conv_small_wgrad_partials(const Strided& dy, const Strided& w_or_dw) {
  const int64_t pixels = dy.sizes[0] * dy.sizes[2] * dy.sizes[3];
  const int64_t filter = w_or_dw.sizes[0] * w_or_dw.sizes[1] * w_or_dw.sizes[2] * w_or_dw.sizes[3];
  return partial_blocks(pixels) * filter;
}

cudaError_t launch_conv_small_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                                    const cpu::ConvParams& p, float* partials,
                                    cudaStream_t stream) {
  if (dw.numel() == 0) return cudaSuccess;
  const ConvGeo g = conv_geo(x, dw, dy, p);
  const int64_t pixels = dy.sizes[0] * dy.sizes[2] * dy.sizes[3];
  if (pixels == 0) return launch_fill(dw, 0.0, stream);
  const int KJ = channels_per_thread(g.K);
  const int64_t blocks = partial_blocks(pixels);
  const int threads = (g.crs() * (g.K / KJ) + 31) / 32 * 32;
  const size_t shared = sizeof(float) * kTilePixels * (g.K + g.crs());
  visit_small(x.dtype, [&]<class S>() {
    visit_channels(KJ, [&]<int V>() {
      small_wgrad_partial_kernel<S, V><<<static_cast<int>(blocks), threads, shared, stream>>>(
          view4<const S>(dy), view4<const S>(x), g, pixels_per_block(pixels), partials);
    });
    small_wgrad_sum_kernel<S><<<blocks_for(dw.numel() * 32), kThreads, 0, stream>>>(
        view4<S>(dw), partials, blocks, g);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
