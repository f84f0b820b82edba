// File: core/cuda/conv_depthwise.cu
// Depthwise convolution kernels (conv_depthwise.h): the forward and the data
// gradient sum a K x K window per element; the weight gradient reduces over the
// pixels in two fixed-order stages. Where the channels-last operands move in
// 16-byte packs, a thread takes V channels (the weight gradient's first stage
// for filters up to 3 x 3); the packed forward and data gradient read the
// filter from a tap-major copy in shared memory, and at the strides MobileNets
// use a packed thread computes several neighbouring columns, loading each input
// column once for all of them; the 16-bit 3 x 3 weight gradient at those
// strides walks a band of output rows of two columns, loading each input row's
// columns once for all of them. Indices are 32-bit where every offset fits
// (divisions by the sizes are then cheap), else 64-bit; the filter side K is a
// template parameter so the window loops unroll and the weight gradient's K * K
// sums live in registers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

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
// channels move in packs (channel_packs_fit). A block owns a tile of at most
// kMaxTile channel packs (threadIdx.x) and walks rows of work items
// (threadIdx.y, grid-stride over blockIdx.y); it stages its tile's filter taps
// in shared memory tap-major, so a thread reads one tap of its V channels in
// one 16-byte access instead of V scalar loads at channel stride R * S. Every
// element sums the same taps in the same order as the kernels above (rows
// outer, columns inner, taps outside the operand skipped).
constexpr int kMaxTile = 32;

// Along the width, either a stride known at compile time with dilation 1 (a
// thread then computes columns_for(stride) neighbouring columns and reuses each
// loaded input column across them), or the stride and dilation read at run
// time (one column a thread).
constexpr int kRuntimeWidth = 0;
// Four columns at stride 1 (six input columns for 3 x 3 instead of twelve); two
// at stride 2, whose windows share less and whose four would take 165
// registers for 3 x 3 bfloat16 (sm_90), one block an SM.
constexpr int columns_for(int stride) { return stride == kRuntimeWidth ? 1 : stride == 1 ? 4 : 2; }
// The weight gradient's threads already hold K * K * V sums, so they take two
// columns at either stride, and only where those sums are at most 36: for 3 x 3
// in 16-bit dtypes (72 sums) two columns took 159 registers on sm_90, or
// spilled 208 bytes under the two-blocks bound below (at strides 1 and 2 those
// take depthwise_wgrad_partial_bands_kernel, in packs of 4 channels).
constexpr bool wgrad_reuses(int side, int V) { return side * side * V <= 36; }
constexpr int wgrad_columns_for(int stride) { return stride == kRuntimeWidth ? 1 : 2; }
// Blocks an SM the packed kernels are compiled for: two for filters up to 3 x 3
// (at most 128 registers a thread), else one.
constexpr int min_blocks_for(int side) { return side <= 3 ? 2 : 1; }

// The launch shape of the packed kernels: `tiles` tiles of `tile` packs (equal
// tiles of at most kMaxTile) times `rows` rows of threads per block.
struct PackTiles {
  int tile = 1, rows = 1;
  int64_t tiles = 1;
};

PackTiles pack_tiles(int64_t packs) {
  PackTiles t;
  t.tiles = (packs + kMaxTile - 1) / kMaxTile;
  t.tile = static_cast<int>((packs + t.tiles - 1) / t.tiles);
  t.rows = kThreads / t.tile;
  return t;
}

// Bytes of shared memory for K * K taps of a full tile (16-byte packs).
template <int K>
constexpr int kTapBytes = K * K * kMaxTile * 16;

// Fills taps[t * blockDim.x + lane] with tap t = r * K + s of the V channels of
// pack `lane` of the block's tile (first channel c0); reads walk the filter in
// memory order. Packs past the last channel stay unset: their threads compute
// nothing. Ends with a barrier, so every thread of the block must call it.
template <class S, class I, int K, int V>
__device__ void stage_taps(Pack<S, V>* taps, const S* w, const DepthwiseArgs& a, I c0) {
  constexpr int kTaps = K * K;
  const int tile = blockDim.x, count = tile * V * kTaps;
  S* flat = reinterpret_cast<S*>(taps);
  for (int i = threadIdx.y * tile + threadIdx.x; i < count; i += tile * blockDim.y) {
    const int t = i % kTaps, local = i / kTaps;
    const I c = c0 + local;
    if (c < I(a.C)) {
      flat[(t * tile + local / V) * V + local % V] =
          w[c * I(a.filter[0]) + (t / K) * I(a.filter[2]) + (t % K) * I(a.filter[3])];
    }
  }
  __syncthreads();
}

template <class S, int V>
__device__ void fma_pack(compute_t<S> (&acc)[V], const Pack<S, V>& value, const Pack<S, V>& tap) {
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] += to_compute(value.v[v]) * to_compute(tap.v[v]);
}

// Rounds kCols accumulated packs and stores those whose column is below `limit`
// at out + column * step (first column col0).
template <class S, class I, int V, int kCols>
__device__ void store_columns(S* out, I step, I col0, I limit, const compute_t<S> (&acc)[kCols][V]) {
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    if (col0 + j >= limit) continue;
    Pack<S, V> value;
#pragma unroll
    for (int v = 0; v < V; ++v) value.v[v] = from_compute<S>(acc[j][v]);
    store_pack(out + (col0 + j) * step, value);
  }
}

// Loads the kSpan packs of `row` at columns first, first + 1, ... (`step`
// elements apart) that lie in [0, limit); inside[e] says which were loaded.
// The forward and weight gradient read x columns with it, the data gradient dy
// columns.
template <class S, class I, int V, int kSpan>
__device__ void load_span(Pack<S, V> (&span)[kSpan], bool (&inside)[kSpan], const S* row, I first, I limit,
                          I step) {
#pragma unroll
  for (int e = 0; e < kSpan; ++e) {
    inside[e] = first + e >= 0 && first + e < limit;
    if (inside[e]) span[e] = load_pack<V>(row + (first + e) * step);
  }
}

// Adds one input row's taps into the forward's kCols outputs (first column q0;
// row points at the row's channel pack). With SW fixed, the kSpan input columns
// the outputs share are loaded once; else kCols is 1 and each tap's column is
// computed from the run-time stride and dilation.
template <class S, class I, int K, int V, int SW, int kCols>
__device__ void forward_row(compute_t<S> (&acc)[kCols][V], const S* row, const Pack<S, V>* taps, int r,
                            I q0, const DepthwiseArgs& a) {
  if constexpr (SW == kRuntimeWidth) {
    const I w0 = q0 * a.stride_w - a.pad_w;
#pragma unroll
    for (int s = 0; s < K; ++s) {
      const I col = w0 + s * a.dilation_w;
      if (col < 0 || col >= I(a.W)) continue;
      fma_pack<S, V>(acc[0], load_pack<V>(row + col * I(a.in[3])), taps[(r * K + s) * blockDim.x]);
    }
  } else {
    constexpr int kSpan = (kCols - 1) * SW + K;
    const I w0 = q0 * SW - a.pad_w;
    Pack<S, V> in[kSpan];
    bool inside[kSpan];
    load_span<S, I, V, kSpan>(in, inside, row, w0, I(a.W), I(a.in[3]));
#pragma unroll
    for (int s = 0; s < K; ++s) {
      const Pack<S, V> tap = taps[(r * K + s) * blockDim.x];
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if (inside[j * SW + s]) fma_pack<S, V>(acc[j], in[j * SW + s], tap);
      }
    }
  }
}

// Work item g = ((n * P + p) * ceil(Q / kCols) + column block): kCols output
// columns of one output row for the thread's channel pack.
template <class S, class I, int K, int V, int SW>
__global__ void __launch_bounds__(kThreads, min_blocks_for(K))
    depthwise_forward_packed_kernel(S* y, const S* x, const S* w, DepthwiseArgs a, I items) {
  using A = compute_t<S>;
  constexpr int kCols = columns_for(SW);
  __shared__ __align__(16) unsigned char staged[kTapBytes<K>];
  Pack<S, V>* taps = reinterpret_cast<Pack<S, V>*>(staged) + threadIdx.x;
  const I pack = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x);
  stage_taps<S, I, K, V>(reinterpret_cast<Pack<S, V>*>(staged), w, a, I(blockIdx.x) * I(blockDim.x) * V);
  if (pack >= I(a.C) / V) return;
  const I c = pack * V, blocks = (I(a.Q) + kCols - 1) / kCols;
  for (I g = I(blockIdx.y) * I(blockDim.y) + I(threadIdx.y); g < items; g += I(gridDim.y) * I(blockDim.y)) {
    const I q0 = (g % blocks) * kCols, np = g / blocks;
    const I p = np % I(a.P), n = np / I(a.P);
    const S* xc = x + n * I(a.in[0]) + c;
    const I h0 = p * a.stride_h - a.pad_h;
    A acc[kCols][V] = {};
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const I h = h0 + r * a.dilation_h;
      if (h < 0 || h >= I(a.H)) continue;
      forward_row<S, I, K, V, SW, kCols>(acc, xc + h * I(a.in[2]), taps, r, q0, a);
    }
    store_columns<S, I, V, kCols>(y + n * I(a.out[0]) + c + p * I(a.out[2]), I(a.out[3]), q0, I(a.Q), acc);
  }
}

// Adds one dy row's taps into the data gradient's kCols outputs (first column
// col0). With unit stride and dilation along the width (SW 1), output column
// col0 + j takes dy column col0 + j + pad - s for tap s, so the kCols + K - 1
// dy columns they share are loaded once; else kCols is 1 and each tap's column
// is checked against the run-time stride and dilation.
template <class S, class I, int K, int V, int SW, int kCols>
__device__ void dgrad_row(compute_t<S> (&acc)[kCols][V], const S* row, const Pack<S, V>* taps, int r,
                          I col0, const DepthwiseArgs& a) {
  if constexpr (SW == kRuntimeWidth) {
#pragma unroll
    for (int s = 0; s < K; ++s) {
      const I u = col0 + a.pad_w - s * a.dilation_w;
      if (u < 0 || u % a.stride_w != 0 || u / a.stride_w >= I(a.Q)) continue;
      fma_pack<S, V>(acc[0], load_pack<V>(row + (u / a.stride_w) * I(a.out[3])),
                     taps[(r * K + s) * blockDim.x]);
    }
  } else {
    static_assert(SW == 1, "the data gradient reuses columns at unit stride only");
    constexpr int kSpan = kCols + K - 1;
    const I u0 = col0 + a.pad_w - (K - 1);  // dy column of e = 0; e = j + K - 1 - s
    Pack<S, V> g[kSpan];
    bool inside[kSpan];
    load_span<S, I, V, kSpan>(g, inside, row, u0, I(a.Q), I(a.out[3]));
#pragma unroll
    for (int s = 0; s < K; ++s) {
      const Pack<S, V> tap = taps[(r * K + s) * blockDim.x];
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if (inside[j + K - 1 - s]) fma_pack<S, V>(acc[j], g[j + K - 1 - s], tap);
      }
    }
  }
}

// Work item g = ((n * H + h) * ceil(W / kCols) + column block): kCols columns
// of one dx row for the thread's channel pack.
template <class S, class I, int K, int V, int SW>
__global__ void __launch_bounds__(kThreads, min_blocks_for(K))
    depthwise_dgrad_packed_kernel(S* dx, const S* dy, const S* w, DepthwiseArgs a, I items) {
  using A = compute_t<S>;
  constexpr int kCols = columns_for(SW);
  __shared__ __align__(16) unsigned char staged[kTapBytes<K>];
  Pack<S, V>* taps = reinterpret_cast<Pack<S, V>*>(staged) + threadIdx.x;
  const I pack = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x);
  stage_taps<S, I, K, V>(reinterpret_cast<Pack<S, V>*>(staged), w, a, I(blockIdx.x) * I(blockDim.x) * V);
  if (pack >= I(a.C) / V) return;
  const I c = pack * V, blocks = (I(a.W) + kCols - 1) / kCols;
  for (I g = I(blockIdx.y) * I(blockDim.y) + I(threadIdx.y); g < items; g += I(gridDim.y) * I(blockDim.y)) {
    const I col0 = (g % blocks) * kCols, nh = g / blocks;
    const I h = nh % I(a.H), n = nh / I(a.H);
    const S* dyc = dy + n * I(a.out[0]) + c;
    A acc[kCols][V] = {};
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const I t = h + a.pad_h - r * a.dilation_h;
      if (t < 0 || t % a.stride_h != 0 || t / a.stride_h >= I(a.P)) continue;
      dgrad_row<S, I, K, V, SW, kCols>(acc, dyc + (t / a.stride_h) * I(a.out[2]), taps, r, col0, a);
    }
    store_columns<S, I, V, kCols>(dx + n * I(a.in[0]) + c + h * I(a.in[2]), I(a.in[3]), col0, I(a.W), acc);
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

// The packed weight gradient's block reduction: thread (lane, row) of `rows`
// rows of `tile` lanes holds the sums acc for channels c .. c + V - 1; rows are
// added pairwise in a fixed order (any count of rows: while n rows hold sums,
// row k < n - ceil(n / 2) adds row k + ceil(n / 2)), and row 0 stores them as
// chunk blockIdx.y's partials. sums holds rows * tile * V values. Every thread
// of the block must call it.
template <class A, int kTaps, int V>
__device__ void store_block_sums(A* partial, const A (&acc)[kTaps][V], A* sums, int lane, int row, int rows,
                                 int tile, int64_t C, int64_t c) {
  A* mine = sums + (row * tile + lane) * V;
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
#pragma unroll
    for (int v = 0; v < V; ++v) mine[v] = acc[t][v];
    __syncthreads();
    for (int n = rows; n > 1; n = (n + 1) / 2) {
      const int half = (n + 1) / 2;
      if (row < n - half) {
#pragma unroll
        for (int v = 0; v < V; ++v) mine[v] += mine[half * tile * V + v];
      }
      __syncthreads();
    }
    if (row == 0 && c < C) {
#pragma unroll
      for (int v = 0; v < V; ++v) partial[(int64_t(blockIdx.y) * C + c + v) * kTaps + t] = mine[v];
    }
    __syncthreads();
  }
}

// Adds one x row's products into the packed weight gradient's taps of row r:
// dy packs g[j] (present where has[j]) of kCols output columns from q0 times the
// x columns their taps read. With SW fixed (dilation 1), the kSpan x columns the
// outputs share are loaded once; else kCols is 1 and each tap's column comes
// from the run-time stride and dilation.
template <class S, class I, int K, int V, int SW, int kCols>
__device__ void wgrad_row(compute_t<S> (&acc)[K * K][V], const Pack<S, V> (&g)[kCols],
                          const bool (&has)[kCols], const S* row, int r, I q0, const DepthwiseArgs& a) {
  if constexpr (SW == kRuntimeWidth) {
    const I w0 = q0 * a.stride_w - a.pad_w;
#pragma unroll
    for (int s = 0; s < K; ++s) {
      const I col = w0 + s * a.dilation_w;
      if (col < 0 || col >= I(a.W)) continue;
      fma_pack<S, V>(acc[r * K + s], load_pack<V>(row + col * I(a.in[3])), g[0]);
    }
  } else {
    constexpr int kSpan = (kCols - 1) * SW + K;
    const I w0 = q0 * SW - a.pad_w;
    Pack<S, V> in[kSpan];
    bool inside[kSpan];
    load_span<S, I, V, kSpan>(in, inside, row, w0, I(a.W), I(a.in[3]));
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
#pragma unroll
      for (int s = 0; s < K; ++s) {
        if (has[j] && inside[j * SW + s]) fma_pack<S, V>(acc[r * K + s], in[j * SW + s], g[j]);
      }
    }
  }
}

// Stage 1 on channels-last operands whose channels move in packs: a lane owns V
// channels (tile lanes = tile * V channels per block) and walks work items
// ((n * P + p) * ceil(Q / kCols) + column block: kCols output columns of one
// row, as the packed forward), reading 16-byte packs of dy and x; the block
// then adds its rows pairwise in a fixed order as above. A chunk is a range of
// items, so each sum runs in a fixed order.
template <class S, class I, int K, int V, int SW>
__global__ void __launch_bounds__(kThreads, min_blocks_for(K))
    depthwise_wgrad_partial_packed_kernel(compute_t<S>* partial, const S* dy, const S* x, DepthwiseArgs a,
                                          I items, I per_chunk, int tile) {
  using A = compute_t<S>;
  constexpr int kTaps = K * K, kCols = wgrad_columns_for(SW);
  const int lane = threadIdx.x % tile, row = threadIdx.x / tile, rows = blockDim.x / tile;
  const I c = (I(blockIdx.x) * tile + lane) * V;
  const I begin = I(blockIdx.y) * per_chunk;
  const I end = begin + per_chunk < items ? begin + per_chunk : items;
  const I blocks = (I(a.Q) + kCols - 1) / kCols;
  A acc[kTaps][V] = {};
  if (c < I(a.C)) {
    for (I item = begin + row; item < end; item += rows) {
      const I q0 = (item % blocks) * kCols, np = item / blocks;
      const I p = np % I(a.P), n = np / I(a.P);
      const S* dyrow = dy + n * I(a.out[0]) + c + p * I(a.out[2]);
      Pack<S, V> g[kCols];
      bool has[kCols];
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        has[j] = q0 + j < I(a.Q);
        if (has[j]) g[j] = load_pack<V>(dyrow + (q0 + j) * I(a.out[3]));
      }
      const S* xc = x + n * I(a.in[0]) + c;
      const I h0 = p * a.stride_h - a.pad_h;
#pragma unroll
      for (int r = 0; r < K; ++r) {
        const I h = h0 + r * a.dilation_h;
        if (h < 0 || h >= I(a.H)) continue;
        wgrad_row<S, I, K, V, SW, kCols>(acc, g, has, xc + h * I(a.in[2]), r, q0, a);
      }
    }
  }
  __shared__ A sums[kThreads * V];
  store_block_sums<A, kTaps, V>(partial, acc, sums, lane, row, rows, tile, a.C, int64_t(c));
}

// The 16-bit 3 x 3 weight gradient at stride 1 or 2 (rows and columns alike,
// dilation 1; 32-bit indices). A thread shares x rows between output rows and
// x columns between output columns: a work item is kBandCols neighbouring
// output columns over a band of kBand output rows, and the thread walks the
// input rows down the band, loading each x row's span of columns once for
// every output row whose window holds it (up to ceil(K / SD) of them) and every
// column. It takes kBandPack channels in 8-byte packs: with 8 (72 sums) one
// column alone, three dy packs and three x packs live, spilled about 100 bytes
// at 128 registers for bfloat16 on sm_90.
constexpr int kBand = 8, kBandCols = 2;
constexpr int kBandPack = 4;

// Adds the products of output rows [p0, p1) of kCols columns (those present
// where has[j]) into acc: dyc points at dy's pack at (row 0, the first column),
// xc at x's channel pack, w0 is the first column's first x column. At step i
// the x rows h = (p0 + i) * SD + u - pad, u < SD, are read; ring[m] holds dy row
// p0 + i - m (live where that row is in the band), whose tap row for h is
// r = u + m * SD, and output column j reads span column j * SD + s for tap s.
// Each sum runs over the band's rows in order, taps outside the operand
// skipped.
template <class S, int K, int V, int SD, int kCols>
__device__ void wgrad_band(compute_t<S> (&acc)[K * K][V], const S* dyc, const S* xc, int p0, int p1, int w0,
                           const bool (&has)[kCols], const DepthwiseArgs& a) {
  constexpr int kRing = (K + SD - 1) / SD, kSpan = (kCols - 1) * SD + K;
  Pack<S, V> ring[kRing][kCols] = {};
  bool live[kRing] = {};
  // The band's last x row, (p1 - 1) * SD + K - 1 - pad, is read at step
  // p1 - p0 - 1 + (K - 1) / SD, and (K - 1) / SD == kRing - 1.
  const int steps = p1 - p0 + kRing - 1;
  for (int i = 0; i < steps; ++i) {
#pragma unroll
    for (int m = kRing - 1; m > 0; --m) {
      live[m] = live[m - 1];
#pragma unroll
      for (int j = 0; j < kCols; ++j) ring[m][j] = ring[m - 1][j];
    }
    live[0] = p0 + i < p1;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      if (live[0] && has[j]) ring[0][j] = load_pack<V>(dyc + (p0 + i) * int(a.out[2]) + j * int(a.out[3]));
    }
#pragma unroll
    for (int u = 0; u < SD; ++u) {
      const int h = (p0 + i) * SD + u - a.pad_h;
      if (h < 0 || h >= int(a.H)) continue;
      Pack<S, V> in[kSpan];
      bool inside[kSpan];
      load_span<S, int, V, kSpan>(in, inside, xc + h * int(a.in[2]), w0, int(a.W), int(a.in[3]));
#pragma unroll
      for (int m = 0; m < kRing; ++m) {
        const int r = u + m * SD;
        if (r >= K || !live[m]) continue;
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
#pragma unroll
          for (int s = 0; s < K; ++s) {
            if (has[j] && inside[j * SD + s]) fma_pack<S, V>(acc[r * K + s], in[j * SD + s], ring[m][j]);
          }
        }
      }
    }
  }
}

// Stage 1 by bands: block (tile, chunk) has rows (threadIdx.y) of `tile` lanes
// (threadIdx.x), a lane owning V channels; row k of the block takes items
// begin + k, begin + k + rows, ... of its chunk, item ((n * bands + band) *
// ceil(Q / kBandCols) + column block), so that a warp's rows read neighbouring
// columns. The block then adds its rows as the packed kernel above does.
template <class S, int K, int V, int SD>
__global__ void __launch_bounds__(kThreads, min_blocks_for(K))
    depthwise_wgrad_partial_bands_kernel(compute_t<S>* partial, const S* dy, const S* x, DepthwiseArgs a,
                                         int items, int bands, int per_chunk) {
  using A = compute_t<S>;
  const int tile = blockDim.x, lane = threadIdx.x, row = threadIdx.y, rows = blockDim.y;
  const int c = (int(blockIdx.x) * tile + lane) * V;
  const int begin = int(blockIdx.y) * per_chunk, end = min(begin + per_chunk, items);
  const int blocks = (int(a.Q) + kBandCols - 1) / kBandCols;
  A acc[K * K][V] = {};
  if (c < int(a.C)) {
    for (int item = begin + row; item < end; item += rows) {
      const int q0 = (item % blocks) * kBandCols, nb = item / blocks;
      const int p0 = (nb % bands) * kBand, n = nb / bands;
      bool has[kBandCols];
#pragma unroll
      for (int j = 0; j < kBandCols; ++j) has[j] = q0 + j < int(a.Q);
      wgrad_band<S, K, V, SD, kBandCols>(acc, dy + n * int(a.out[0]) + c + q0 * int(a.out[3]),
                                         x + n * int(a.in[0]) + c, p0, min(p0 + kBand, int(a.P)),
                                         q0 * SD - a.pad_w, has, a);
    }
  }
  __shared__ A sums[kThreads * V];
  store_block_sums<A, K * K, V>(partial, acc, sums, lane, row, rows, tile, a.C, c);
}

// Stage 2: dw[c, 0, r, s] = the chunks' partial sums. A block takes
// kFinalLanes outputs at a time; slice k of its kFinalSlices sums chunks k,
// k + kFinalSlices, ... in order, and the slices' sums are added in slice
// order, so the order is fixed and each output's chunks are read by
// kFinalSlices threads at once.
constexpr int kFinalLanes = 32, kFinalSlices = kThreads / kFinalLanes;

template <class S>
__global__ void __launch_bounds__(kThreads)
    depthwise_wgrad_finalize_kernel(S* dw, const compute_t<S>* partial, DepthwiseArgs a, int K,
                                    int64_t chunks) {
  using A = compute_t<S>;
  __shared__ A sums[kFinalSlices][kFinalLanes];
  const int64_t taps = int64_t(K) * K, total = a.C * taps;
  const int lane = threadIdx.x, slice = threadIdx.y;
  // base depends on the block only, so every thread reaches the barriers.
  const int64_t step = int64_t(gridDim.x) * kFinalLanes;
  for (int64_t base = int64_t(blockIdx.x) * kFinalLanes; base < total; base += step) {
    const int64_t i = base + lane;
    A sum = 0;
    if (i < total) {
      for (int64_t chunk = slice; chunk < chunks; chunk += kFinalSlices) sum += partial[chunk * total + i];
    }
    sums[slice][lane] = sum;
    __syncthreads();
    if (slice == 0 && i < total) {
      for (int k = 1; k < kFinalSlices; ++k) sum += sums[k][lane];
      const int64_t c = i / taps, t = i % taps;
      dw[c * a.filter[0] + (t / K) * a.filter[2] + (t % K) * a.filter[3]] = from_compute<S>(sum);
    }
    __syncthreads();
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

// Launches a packed forward or data gradient kernel over `items` work items of
// `packs` channel packs each (kernel as depthwise_forward_packed_kernel's form).
template <class S, class I, class Kernel>
void launch_packed(Kernel kernel, S* out, const S* in, const S* w, const DepthwiseArgs& a, int64_t packs,
                   int64_t items, cudaStream_t stream) {
  const PackTiles t = pack_tiles(packs);
  const dim3 grid(static_cast<unsigned>(t.tiles),
                  static_cast<unsigned>(std::min((items + t.rows - 1) / t.rows, kMaxBlocks)));
  kernel<<<grid, dim3(t.tile, t.rows), 0, stream>>>(out, in, w, a, I(items));
}

// True when the weight gradient takes depthwise_wgrad_partial_bands_kernel:
// 16-bit channels in packs of kBandPack, a 3 x 3 filter, stride 1 or 2 and dilation 1 in both
// directions, 32-bit indices.
template <class S>
bool by_bands(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p) {
  static_assert(sizeof(S) == 2, "the band kernel is built for 16-bit dtypes");
  return dw.sizes[2] == 3 && channel_packs_fit(x, kBandPack) && channel_packs_fit(dy, kBandPack) &&
         p.stride_h == p.stride_w && (p.stride_w == 1 || p.stride_w == 2) && p.dilation_h == 1 &&
         p.dilation_w == 1 && fits_int32(dy.sizes[0] * dy.sizes[2] * dy.sizes[3], x, dy, dw);
}

// The launch of depthwise_wgrad_partial_bands_kernel: equal channel tiles of at
// most kBandTile packs (16-bit, 128 bytes of a pixel: a whole memory segment,
// and several tiles for the block count even where C is small) by rows of
// kThreads / tile threads, and about kBandBlocks blocks, each chunk a whole
// number of rounds of the block's rows. Never more chunks than `most`.
constexpr int kBandTile = 128 / (2 * kBandPack);
constexpr int64_t kBandBlocks = 512;

struct BandSplit {
  int tile = 1, rows = 1;
  int64_t tiles = 1, chunks = 1, per_chunk = 1;
};

BandSplit band_split(int64_t packs, int64_t items, int64_t most) {
  BandSplit b;
  b.tiles = (packs + kBandTile - 1) / kBandTile;
  b.tile = static_cast<int>((packs + b.tiles - 1) / b.tiles);
  b.rows = kThreads / b.tile;
  const int64_t wanted = std::clamp<int64_t>((kBandBlocks + b.tiles - 1) / b.tiles, 1, most);
  // per_chunk * wanted >= items, so chunks <= wanted <= most.
  b.per_chunk = std::max<int64_t>(1, (items + wanted * b.rows - 1) / (wanted * b.rows)) * b.rows;
  b.chunks = (items + b.per_chunk - 1) / b.per_chunk;
  return b;
}

// Launches the band kernel for the stride (by_bands holds); returns its chunks,
// at most the chunks of depthwise_wgrad_split that sized the scratch.
template <class S>
int64_t launch_wgrad_bands(compute_t<S>* partial, const Strided& dy, const Strided& x, const DepthwiseArgs& a,
                           cudaStream_t stream) {
  constexpr int V = kBandPack;
  const int64_t bands = (a.P + kBand - 1) / kBand, items = a.N * bands * ((a.Q + kBandCols - 1) / kBandCols);
  const BandSplit b = band_split(a.C / V, items, depthwise_wgrad_split(a.C, a.N * a.P * a.Q, true).chunks);
  const dim3 grid(static_cast<unsigned>(b.tiles), static_cast<unsigned>(b.chunks)), block(b.tile, b.rows);
  const auto kernel = a.stride_w == 1 ? depthwise_wgrad_partial_bands_kernel<S, 3, V, 1>
                                      : depthwise_wgrad_partial_bands_kernel<S, 3, V, 2>;
  kernel<<<grid, block, 0, stream>>>(partial, dy.ptr<const S>(), x.ptr<const S>(), a, static_cast<int>(items),
                                     static_cast<int>(bands), static_cast<int>(b.per_chunk));
  return b.chunks;
}

// Launches the packed or the per-channel stage 1 for what by_bands declines;
// returns its chunks.
template <class S>
int64_t launch_wgrad_partial(const Strided& dw, const Strided& dy, const Strided& x,
                             const kernel::ConvParams& p, const DepthwiseArgs& a, compute_t<S>* partial,
                             cudaStream_t stream) {
  constexpr int V = kPackOf<S>;
  const int64_t pixels = a.N * a.P * a.Q;
  // Packs for filters up to 3 x 3 (K * K * V accumulators per thread stay in
  // registers); column reuse for the strides MobileNets use, in 32-bit indices.
  const bool packed = dw.sizes[2] <= 3 && channel_packs_fit(x, V) && channel_packs_fit(dy, V);
  const bool narrow = fits_int32(pixels, x, dy, dw);
  const bool reuse = packed && narrow && wgrad_reuses(static_cast<int>(dw.sizes[2]), V) &&
                     p.dilation_w == 1 && (p.stride_w == 1 || p.stride_w == 2);
  const int64_t columns = reuse ? wgrad_columns_for(p.stride_w) : 1;
  const int64_t items = a.N * a.P * ((a.Q + columns - 1) / columns);
  // depthwise_wgrad_packed_split's chunks for `items` <= its chunks for `pixels`
  // (they grow with the count), which the scratch is sized by.
  const DepthwiseSplit split = packed ? depthwise_wgrad_packed_split(a.C, V, items)
                                      : depthwise_wgrad_split(a.C, pixels, a.channels_innermost);
  const int64_t work = packed ? items : pixels;
  const int64_t per_chunk = (work + split.chunks - 1) / split.chunks;
  const int64_t lanes = packed ? a.C / V : a.C;
  const dim3 grid(static_cast<unsigned>((lanes + split.tile - 1) / split.tile),
                  static_cast<unsigned>(split.chunks));
  visit_index_and_side(narrow, dw.sizes[2], [&]<class I, int K>() {
    if constexpr (K <= 3) {
      if (packed) {
        const auto run = [&](auto kernel) {
          kernel<<<grid, kThreads, 0, stream>>>(partial, dy.ptr<const S>(), x.ptr<const S>(), a, I(items),
                                                I(per_chunk), split.tile);
        };
        if constexpr (std::is_same_v<I, int32_t> && wgrad_reuses(K, V)) {
          if (reuse && p.stride_w == 1) return run(depthwise_wgrad_partial_packed_kernel<S, I, K, V, 1>);
          if (reuse) return run(depthwise_wgrad_partial_packed_kernel<S, I, K, V, 2>);
        }
        return run(depthwise_wgrad_partial_packed_kernel<S, I, K, V, kRuntimeWidth>);
      }
    }
    depthwise_wgrad_partial_kernel<S, I, K><<<grid, kThreads, 0, stream>>>(
        partial, dy.ptr<const S>(), x.ptr<const S>(), a, I(pixels), I(per_chunk), split.tile);
  });
  return split.chunks;
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
      if (!packed) {
        depthwise_forward_kernel<S, I, K><<<blocks_for(total), kThreads, 0, stream>>>(
            y.ptr<S>(), x.ptr<const S>(), w.ptr<const S>(), a, I(total));
        return;
      }
      const int64_t packs = a.C / V, rows = a.N * a.P;
      const auto run = [&](auto kernel, int64_t columns) {
        launch_packed<S, I>(kernel, y.ptr<S>(), x.ptr<const S>(), w.ptr<const S>(), a, packs,
                            rows * ((a.Q + columns - 1) / columns), stream);
      };
      // Column reuse for the strides MobileNets use, in 32-bit indices.
      if constexpr (std::is_same_v<I, int32_t>) {
        if (p.dilation_w == 1 && p.stride_w == 1) {
          return run(depthwise_forward_packed_kernel<S, I, K, V, 1>, columns_for(1));
        }
        if (p.dilation_w == 1 && p.stride_w == 2) {
          return run(depthwise_forward_packed_kernel<S, I, K, V, 2>, columns_for(2));
        }
      }
      run(depthwise_forward_packed_kernel<S, I, K, V, kRuntimeWidth>, 1);
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
      if (!packed) {
        depthwise_dgrad_kernel<S, I, K><<<blocks_for(total), kThreads, 0, stream>>>(
            dx.ptr<S>(), dy.ptr<const S>(), w.ptr<const S>(), a, I(total));
        return;
      }
      const int64_t packs = a.C / V, rows = a.N * a.H;
      const auto run = [&](auto kernel, int64_t columns) {
        launch_packed<S, I>(kernel, dx.ptr<S>(), dy.ptr<const S>(), w.ptr<const S>(), a, packs,
                            rows * ((a.W + columns - 1) / columns), stream);
      };
      if constexpr (std::is_same_v<I, int32_t>) {
        if (p.dilation_w == 1 && p.stride_w == 1) {
          return run(depthwise_dgrad_packed_kernel<S, I, K, V, 1>, columns_for(1));
        }
      }
      run(depthwise_dgrad_packed_kernel<S, I, K, V, kRuntimeWidth>, 1);
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
    int64_t chunks = 0;  // the partials the finalize adds: none for an empty output
    if (pixels > 0) {
      chunks = [&] {
        if constexpr (sizeof(S) == 2) {
          if (by_bands<S>(dw, dy, x, p)) return launch_wgrad_bands<S>(scratch.ptr<A>(), dy, x, a, stream);
        }
        return launch_wgrad_partial<S>(dw, dy, x, p, a, scratch.ptr<A>(), stream);
      }();
    }
    const int64_t outputs = a.C * dw.sizes[2] * dw.sizes[3];
    const int64_t blocks = std::min((outputs + kFinalLanes - 1) / kFinalLanes, kMaxBlocks);
    const dim3 block(kFinalLanes, kFinalSlices);
    depthwise_wgrad_finalize_kernel<S><<<static_cast<unsigned>(blocks), block, 0, stream>>>(
        dw.ptr<S>(), scratch.ptr<const A>(), a, static_cast<int>(dw.sizes[2]), chunks);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
