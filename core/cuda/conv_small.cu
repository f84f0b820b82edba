// File: core/cuda/conv_small.cu
// Small-channel direct convolution (conv_small.h), tiled. A block takes a tile
// of TR output rows by TQ output columns of one image and stages the input
// window under it, C x in_rows x in_cols float32 with the padding as zeros, in
// shared memory once; every tap then reads shared memory.
//
// Forward: the whole filter also sits in shared memory as float32
// [C * R * S][K]. A thread owns KB consecutive output channels (8, 4, 2 or 1:
// the largest that divides K, or fewer where a small launch needs more
// threads) of kPixels output columns of one row, so each weight it loads feeds
// kPixels multiply-adds and each input value KB. At column stride 1 with a 3-,
// 5- or 7-wide filter the columns are consecutive and a filter row's taps
// slide over kPixels - 1 + S inputs held in registers. A bias and a ReLU may
// follow, before the one rounding to the output dtype.
//
// Weight gradient: the block also stages the tile's output gradient as float32
// [pixel][K]. A thread owns a KJ x kTaps block of dw (KJ channels, kTaps
// filter taps) and one slice of the tile's columns; the slices of a block are
// summed in a fixed order, then a second kernel sums the blocks' partials in a
// fixed order: the same bits every run, and no float atomics. (KJ x kTaps
// floats per thread, at most kThreads threads: the slices' sums fit the
// 48 KiB of shared memory.) The bias gradient, where asked for, rides along:
// thread t also sums channel t % K of every (threads / K)-th pixel of each
// staged gradient tile, and those sums take the same two fixed-order stages,
// so db costs no pass of its own over dy.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include <algorithm>
#include <cstdint>

#include "core/cuda/conv_small_kernels.h"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/view4.cuh"
#include "core/kernel/activation.h"

namespace loom::cuda {

namespace {

constexpr int kPixels = 4;  // forward: output columns per thread
constexpr int kTaps = 4;    // weight gradient: filter taps per thread
// Shared-memory budgets (48 KiB in all, the most a block gets without opting in).
constexpr int64_t kFilterBytes = 32 * 1024, kInputTileBytes = 16 * 1024;
constexpr int64_t kGradTileBytes = 24 * 1024;
// Gradient tiles: at most kMaxGradTilePixels, and small enough that the
// batch makes about a tile per block (kMaxPartialBlocks blocks of at least
// kMinPixelsPerBlock pixels).
constexpr int64_t kMinGradTilePixels = 16, kMaxGradTilePixels = 256;
constexpr int64_t kMaxPartialBlocks = 512, kMinPixelsPerBlock = 64;
// Below this many forward threads a thread takes fewer channels (down to one),
// so that a small batch of small planes still fills the GPU.
constexpr int64_t kMinForwardThreads = 24 * 1024;
constexpr int kMaxForwardBlocks = 1024;  // each stages the whole filter
// Fewer forward tiles than this get shorter ones: with one block per SM the
// staging of each tile stalls its SM (an H100 has 132).
constexpr int64_t kMinForwardTiles = 256;

// Every size fits 32 bits (a plane or channel count); offsets are 64-bit.
struct ConvGeo {
  int N, C, H, W, K, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w;

  __host__ __device__ int crs() const { return C * R * S; }
};

ConvGeo conv_geo(const Strided& x, const Strided& w, const Strided& y, const kernel::ConvParams& p) {
  return {static_cast<int>(x.sizes[0]), static_cast<int>(x.sizes[1]), static_cast<int>(x.sizes[2]),
          static_cast<int>(x.sizes[3]), static_cast<int>(w.sizes[0]), static_cast<int>(w.sizes[2]),
          static_cast<int>(w.sizes[3]), static_cast<int>(y.sizes[2]), static_cast<int>(y.sizes[3]),
          static_cast<int>(p.stride_h), static_cast<int>(p.stride_w), static_cast<int>(p.pad_h),
          static_cast<int>(p.pad_w)};
}

// TR output rows by TQ output columns, and the input window they read.
struct Tile {
  int rows, cols;          // TR, TQ
  int in_rows, in_cols;    // (TR - 1) * stride_h + R, (TQ - 1) * stride_w + S
  int tiles_p, tiles_q;    // tiles per image, down and across

  __host__ __device__ int64_t count(const ConvGeo& g) const { return int64_t(g.N) * tiles_p * tiles_q; }
};

Tile make_tile(const ConvGeo& g, int rows, int cols) {
  Tile t{};
  t.rows = rows, t.cols = cols;
  t.in_rows = (rows - 1) * g.stride_h + g.R;
  t.in_cols = (cols - 1) * g.stride_w + g.S;
  t.tiles_p = static_cast<int>(ceil_div(g.P, rows));
  t.tiles_q = static_cast<int>(ceil_div(g.Q, cols));
  return t;
}

int64_t input_tile_bytes(const ConvGeo& g, const Tile& t) {
  return int64_t(sizeof(float)) * g.C * t.in_rows * t.in_cols;
}

// The largest tile of at most `rows` x `cols` (cols a multiple of col_step)
// whose input window fits its budget: rows shrink first, then columns.
Tile fitted_tile(const ConvGeo& g, int rows, int cols, int col_step) {
  Tile t = make_tile(g, rows, cols);
  while (input_tile_bytes(g, t) > kInputTileBytes && (rows > 1 || cols > col_step)) {
    if (rows > 1) {
      --rows;
    } else {
      cols = std::max(col_step, cols / 2 / col_step * col_step);
    }
    t = make_tile(g, rows, cols);
  }
  return t;
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

// w (K, C, R, S), any strides -> filter[crs * K + k] in float32. A thread
// takes whole filter rows (k, c, r): three divisions per S elements.
template <class S>
__device__ void stage_filter(float* filter, View4<const S> w, const ConvGeo& g) {
  for (int i = threadIdx.x; i < g.K * g.C * g.R; i += blockDim.x) {
    const int r = i % g.R, c = i / g.R % g.C, k = i / (g.R * g.C);
    float* out = filter + (c * g.R + r) * g.S * g.K + k;
    for (int s = 0; s < g.S; ++s) out[s * g.K] = to_compute(w(k, c, r, s));
  }
}

// The tile's image and its first output row and column.
struct TileOrigin {
  int64_t n;
  int p0, q0;
};

template <class I>
__device__ TileOrigin split_tile(I index, const Tile& t) {
  const int tq = static_cast<int>(index % t.tiles_q);
  index /= t.tiles_q;
  const int tp = static_cast<int>(index % t.tiles_p);
  return {static_cast<int64_t>(index / t.tiles_p), tp * t.rows, tq * t.cols};
}

// 32-bit divisions below 2^32 tiles: a fraction of the cost of 64-bit ones.
__device__ TileOrigin tile_origin(int64_t index, const Tile& t) {
  return index <= UINT32_MAX ? split_tile(static_cast<uint32_t>(index), t) : split_tile(index, t);
}

// (row, col) of a grid `cols` wide, from linear index `first` in steps of
// `step`: one division at the start instead of two per element.
struct GridWalk {
  int row, col, cols, row_step, col_step;

  __device__ GridWalk(int first, int step, int width) : cols(width) {
    row = first / cols, col = first - row * cols;
    row_step = step / cols, col_step = step - row_step * cols;
  }
  __device__ void next() {
    row += row_step, col += col_step;
    if (col >= cols) col -= cols, ++row;
  }
};

// The input window under the tile -> in_tile[c][row][col] in float32, zeros
// where the window leaves the input (the convolution's padding).
template <class S>
__device__ void stage_input(float* in_tile, View4<const S> x, const ConvGeo& g, const Tile& t,
                            const TileOrigin& o) {
  const int h0 = o.p0 * g.stride_h - g.pad_h, w0 = o.q0 * g.stride_w - g.pad_w;
  const int plane = t.in_rows * t.in_cols;
  for (GridWalk at(threadIdx.x, blockDim.x, t.in_cols); at.row < t.in_rows; at.next()) {
    const int h = h0 + at.row, w = w0 + at.col;
    const bool inside = h >= 0 && h < g.H && w >= 0 && w < g.W;
    float* out = in_tile + at.row * t.in_cols + at.col;
    for (int c = 0; c < g.C; ++c) out[c * plane] = inside ? to_compute(x(o.n, c, h, w)) : 0.0f;
  }
}

// Forward thread layout: KG = K / KB channel groups, GQ column groups, TR rows.
// Channels-last y numbers the channel groups fastest (neighbouring threads
// write neighbouring channels of a pixel); NCHW y numbers the columns fastest.
struct ForwardLayout {
  int groups, col_groups;  // KG, GQ
  bool channels_inner;
};

// What the forward adds to each output before storing it: a bias per output
// channel (none where bias is null), then ReLU when asked.
template <class S>
struct Epilogue {
  const S* bias;
  int64_t bias_stride;
  bool relu;

  __device__ float operator()(float v, int k) const {
    if (bias != nullptr) v += to_compute(bias[k * bias_stride]);
    return relu ? kernel::act::Relu::forward(v, 0.0f, 0.0f) : v;
  }
};

// The forward's multiply-adds for one output row: acc[i][j] += the taps of
// channel kg * KB + j at the pixel in column col(i). Taps go in (c, r, s) order
// on either path, so both give the same bits.
//
// Strided columns (kWindow false): col(i) = qg + i * GQ, so that neighbouring
// threads read neighbouring input columns (no bank conflicts) and, for NCHW y,
// write neighbouring outputs. Each tap reads kPixels inputs.
template <int KB, int kS>
__device__ void accumulate_strided(float (&acc)[kPixels][KB], const float* in_tile, const float* filter,
                                   const ConvGeo& g, const Tile& t, const ForwardLayout& f, int row,
                                   int kg, int qg) {
  const int filter_s = kS > 0 ? kS : g.S;
  for (int c = 0; c < g.C; ++c) {
    for (int r = 0; r < g.R; ++r) {
      const float* in_row = in_tile + (c * t.in_rows + row * g.stride_h + r) * t.in_cols;
      const float* w_row = filter + (c * g.R + r) * filter_s * g.K + kg * KB;
      const float* in_at[kPixels];
#pragma unroll
      for (int i = 0; i < kPixels; ++i) in_at[i] = in_row + (qg + i * f.col_groups) * g.stride_w;
#pragma unroll(kS > 0 ? kS : 1)
      for (int s = 0; s < filter_s; ++s) {
        float wv[KB];
        load_row<KB>(wv, w_row + s * g.K);
#pragma unroll
        for (int i = 0; i < kPixels; ++i) {
          const float xv = in_at[i][s];
#pragma unroll
          for (int j = 0; j < KB; ++j) acc[i][j] = fmaf(xv, wv[j], acc[i][j]);
        }
      }
    }
  }
}

// A sliding window (kWindow true: column stride 1, filter width kS known):
// col(i) = qg * kPixels + i, so a filter row's kS taps of the thread's
// kPixels pixels read only kPixels - 1 + kS inputs, held in registers.
template <int KB, int kS>
__device__ void accumulate_window(float (&acc)[kPixels][KB], const float* in_tile, const float* filter,
                                  const ConvGeo& g, const Tile& t, int row, int kg, int qg) {
  constexpr int kWidth = kPixels - 1 + kS;
  for (int c = 0; c < g.C; ++c) {
    for (int r = 0; r < g.R; ++r) {
      const float* in_row = in_tile + (c * t.in_rows + row * g.stride_h + r) * t.in_cols + qg * kPixels;
      const float* w_row = filter + (c * g.R + r) * kS * g.K + kg * KB;
      float window[kWidth];
#pragma unroll
      for (int e = 0; e < kWidth; ++e) window[e] = in_row[e];
#pragma unroll
      for (int s = 0; s < kS; ++s) {
        float wv[KB];
        load_row<KB>(wv, w_row + s * g.K);
#pragma unroll
        for (int i = 0; i < kPixels; ++i) {
#pragma unroll
          for (int j = 0; j < KB; ++j) acc[i][j] = fmaf(window[i + s], wv[j], acc[i][j]);
        }
      }
    }
  }
}

// kS: the filter's width when the launch knows it at compile time (3, 5 or 7:
// the tap loop unrolls, and every input read of a filter row is one address
// plus a constant), else 0 (g.S at run time). kWindow: accumulate_window's
// column order (needs kS and column stride 1).
template <class S, int KB, int kS, bool kWindow>
__global__ void small_forward_kernel(View4<S> y, View4<const S> x, View4<const S> w, ConvGeo g,
                                     Tile t, ForwardLayout f, Epilogue<S> epilogue, bool packed_store) {
  extern __shared__ float shared[];
  float* filter = shared;                      // [C * R * S][K]
  float* in_tile = shared + g.crs() * g.K;     // [C][in_rows][in_cols]
  stage_filter(filter, w, g);
  const int tid = threadIdx.x;
  const int kg = f.channels_inner ? tid % f.groups : tid / f.col_groups % f.groups;
  const int qg = f.channels_inner ? tid / f.groups % f.col_groups : tid % f.col_groups;
  const int row = tid / (f.groups * f.col_groups);
  const int64_t tiles = t.count(g);
  for (int64_t index = blockIdx.x; index < tiles; index += gridDim.x) {
    const TileOrigin o = tile_origin(index, t);
    __syncthreads();  // the previous tile's readers are done
    stage_input(in_tile, x, g, t, o);
    __syncthreads();
    const int p = o.p0 + row;
    if (row >= t.rows || p >= g.P) continue;
    float acc[kPixels][KB];
#pragma unroll
    for (int i = 0; i < kPixels; ++i) {
#pragma unroll
      for (int j = 0; j < KB; ++j) acc[i][j] = 0.0f;
    }
    if constexpr (kWindow) {
      accumulate_window<KB, kS>(acc, in_tile, filter, g, t, row, kg, qg);
    } else {
      accumulate_strided<KB, kS>(acc, in_tile, filter, g, t, f, row, kg, qg);
    }
#pragma unroll
    for (int i = 0; i < kPixels; ++i) {
      const int q = o.q0 + (kWindow ? qg * kPixels + i : qg + i * f.col_groups);
      if (q >= g.Q) continue;
      if (packed_store) {
        Pack<S, KB> out;
#pragma unroll
        for (int j = 0; j < KB; ++j) out.v[j] = from_compute<S>(epilogue(acc[i][j], kg * KB + j));
        store_pack(y.at(o.n, kg * KB, p, q), out);
      } else {
#pragma unroll
        for (int j = 0; j < KB; ++j) {
          y(o.n, kg * KB + j, p, q) = from_compute<S>(epilogue(acc[i][j], kg * KB + j));
        }
      }
    }
  }
}

// The tile's output gradient -> grad_tile[row * TQ + col][k] in float32 (only
// the rows and columns inside the output). `packed`: channels are contiguous
// and KJ-aligned, so a thread loads KJ channels at once.
template <class S, int KJ>
__device__ void stage_grad(float* grad_tile, View4<const S> dy, const ConvGeo& g, const Tile& t,
                           const TileOrigin& o, int rows, int cols, bool packed) {
  if (packed) {  // `groups` threads per pixel, each loading KJ channels
    const int groups = g.K / KJ, lanes = blockDim.x / groups;
    if (static_cast<int>(threadIdx.x) >= lanes * groups) return;
    const int kg = threadIdx.x % groups;
    for (GridWalk at(threadIdx.x / groups, lanes, cols); at.row < rows; at.next()) {
      const S* from = dy.at(o.n, kg * KJ, o.p0 + at.row, o.q0 + at.col);
      const Pack<S, KJ> v = load_pack<KJ>(from);
      float* out = grad_tile + (at.row * t.cols + at.col) * g.K + kg * KJ;
#pragma unroll
      for (int j = 0; j < KJ; ++j) out[j] = to_compute(v.v[j]);
    }
    return;
  }
  for (int i = threadIdx.x; i < rows * cols * g.K; i += blockDim.x) {
    const int col = i % cols, k = i / cols % g.K, row = i / (cols * g.K);
    grad_tile[(row * t.cols + col) * g.K + k] = to_compute(dy(o.n, k, o.p0 + row, o.q0 + col));
  }
}

// Weight-gradient thread layout: units = (K / KJ) x ceil(CRS / kTaps) blocks
// of dw, each summed by `slices` threads over interleaved tile columns.
struct GradLayout {
  int groups, tap_groups, units, slices;

  __host__ __device__ int threads() const { return units * slices; }
  // With the bias gradient: threads / K threads per channel (K <= threads).
  __host__ __device__ int bias_slices(int K) const { return threads() / K; }
};

// The bias gradient's share of thread t: channel t % K of every bias_slices-th
// pixel of a gradient tile, from pixel t / K on.
struct BiasShare {
  int k, slice, slices;
  float sum = 0.0f;

  __device__ BiasShare(const ConvGeo& g, const GradLayout& l)
      : k(threadIdx.x % g.K), slice(threadIdx.x / g.K), slices(l.bias_slices(g.K)) {}
  __device__ bool active() const { return slice < slices; }

  // Adds this thread's pixels of the staged tile (rows x cols, t.cols wide).
  __device__ void add(const float* grad_tile, const ConvGeo& g, const Tile& t, int rows, int cols) {
    if (!active()) return;
    for (GridWalk at(slice, slices, cols); at.row < rows; at.next()) {
      sum += grad_tile[(at.row * t.cols + at.col) * g.K + k];
    }
  }
};

// Stage 1: block b sums tiles [b * tiles / blocks, (b + 1) * tiles / blocks),
// in order, into partials[k * CRS + crs][b].
// With `bias`, also partials[(K * CRS + k)][b]: block b's sum of dy[., k, ., .].
template <class S, int KJ>
__global__ void small_wgrad_partial_kernel(View4<const S> dy, View4<const S> x, ConvGeo g, Tile t,
                                           GradLayout l, bool packed, bool bias, float* partials) {
  extern __shared__ float shared[];
  // The gradient tile first: its rows are KJ-aligned for load_row's 16-byte loads.
  float* grad_tile = shared;                                 // [TR * TQ][K]
  float* in_tile = shared + t.rows * t.cols * g.K;           // [C][in_rows][in_cols]
  const int crs_count = g.crs();
  const int unit = threadIdx.x % l.units, slice = threadIdx.x / l.units;
  const int kg = unit % l.groups, tap0 = unit / l.groups * kTaps;
  int tap_offset[kTaps];  // each tap's offset in the input tile
#pragma unroll
  for (int e = 0; e < kTaps; ++e) {
    const int crs = min(tap0 + e, crs_count - 1);
    const int c = crs / (g.R * g.S), r = crs / g.S % g.R, s = crs % g.S;
    tap_offset[e] = (c * t.in_rows + r) * t.in_cols + s;
  }
  float acc[KJ][kTaps];
#pragma unroll
  for (int j = 0; j < KJ; ++j) {
#pragma unroll
    for (int e = 0; e < kTaps; ++e) acc[j][e] = 0.0f;
  }
  BiasShare bias_share(g, l);
  const int64_t tiles = t.count(g);
  const int64_t first = tiles * blockIdx.x / gridDim.x, last = tiles * (blockIdx.x + 1) / gridDim.x;
  for (int64_t index = first; index < last; ++index) {
    const TileOrigin o = tile_origin(index, t);
    const int rows = min(t.rows, g.P - o.p0), cols = min(t.cols, g.Q - o.q0);
    __syncthreads();  // the previous tile's readers are done
    stage_input(in_tile, x, g, t, o);
    stage_grad<S, KJ>(grad_tile, dy, g, t, o, rows, cols, packed);
    __syncthreads();
    if (bias) bias_share.add(grad_tile, g, t, rows, cols);
    for (int row = 0; row < rows; ++row) {
      for (int col = slice; col < cols; col += l.slices) {
        const float* in_at = in_tile + row * g.stride_h * t.in_cols + col * g.stride_w;
        float gv[KJ];
        load_row<KJ>(gv, grad_tile + (row * t.cols + col) * g.K + kg * KJ);
#pragma unroll
        for (int e = 0; e < kTaps; ++e) {
          const float xv = in_at[tap_offset[e]];
#pragma unroll
          for (int j = 0; j < KJ; ++j) acc[j][e] = fmaf(gv[j], xv, acc[j][e]);
        }
      }
    }
  }
  // Every slice's sums go to shared memory; then each thread adds the slices
  // of some of the block's outputs in slice order.
  __syncthreads();  // the last tile's readers are done
  float* slice_sums = shared;  // [slices][units][KJ][kTaps]
  const int per_slice = l.units * KJ * kTaps;
#pragma unroll
  for (int j = 0; j < KJ; ++j) {
#pragma unroll
    for (int e = 0; e < kTaps; ++e) {
      slice_sums[slice * per_slice + (unit * KJ + j) * kTaps + e] = acc[j][e];
    }
  }
  float* bias_sums = slice_sums + l.slices * per_slice;  // [bias slice][K]
  if (bias && bias_share.active()) bias_sums[bias_share.slice * g.K + bias_share.k] = bias_share.sum;
  __syncthreads();
  if (bias && static_cast<int>(threadIdx.x) < g.K) {
    float sum = 0.0f;
    for (int from = 0; from < bias_share.slices; ++from) sum += bias_sums[from * g.K + threadIdx.x];
    partials[(int64_t(g.K) * crs_count + threadIdx.x) * gridDim.x + blockIdx.x] = sum;
  }
  for (int o = threadIdx.x; o < per_slice; o += blockDim.x) {
    const int owner = o / (KJ * kTaps), j = o / kTaps % KJ, e = o % kTaps;
    const int tap = owner / l.groups * kTaps + e;
    if (tap >= crs_count) continue;
    float sum = 0.0f;
    for (int from = 0; from < l.slices; ++from) sum += slice_sums[from * per_slice + o];
    const int k = owner % l.groups * KJ + j;
    partials[(int64_t(k) * crs_count + tap) * gridDim.x + blockIdx.x] = sum;
  }
}

// Stage 2: a warp per dw[k][crs]. Lane l sums the partials of blocks l, l + 32,
// ... in order, then the lanes combine in a fixed shuffle tree: the same
// order every run.
// Outputs past dw's K * CRS are db's K (where db is not null).
template <class S>
__global__ void small_wgrad_sum_kernel(View4<S> dw, S* db, int64_t db_stride, const float* partials,
                                       int64_t blocks, ConvGeo g) {
  const int crs_count = g.crs();
  const int64_t weights = int64_t(g.K) * crs_count;
  const int64_t outputs = weights + (db != nullptr ? g.K : 0);
  const int lane = threadIdx.x % 32;
  for (int64_t o = first_index() / 32; o < outputs; o += index_step() / 32) {
    const float* row = partials + o * blocks;  // [output][block]
    float sum = 0.0f;
    for (int64_t b = lane; b < blocks; b += 32) sum += row[b];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0 && o >= weights) {
      db[(o - weights) * db_stride] = from_compute<S>(sum);
    } else if (lane == 0) {
      const int k = static_cast<int>(o / crs_count), e = static_cast<int>(o % crs_count);
      dw(k, e / (g.R * g.S), e / g.S % g.R, e % g.S) = from_compute<S>(sum);
    }
  }
}

// A block per kMinPixelsPerBlock output pixels, at most kMaxPartialBlocks: fixed by the shape alone.
int64_t partial_blocks(int64_t pixels) {
  return std::clamp<int64_t>(ceil_div(pixels, kMinPixelsPerBlock), 1, kMaxPartialBlocks);
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

// fn.template operator()<kS>() with kS = S for the filter widths the forward
// unrolls (3, 5, 7), else 0.
template <class Fn>
void visit_filter_width(int S, Fn&& fn) {
  switch (S) {
    case 3: return fn.template operator()<3>();
    case 5: return fn.template operator()<5>();
    case 7: return fn.template operator()<7>();
    default: return fn.template operator()<0>();
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

// Channels per forward thread: the most that divide K, halved while the
// launch would have too few threads.
int forward_channels(const ConvGeo& g) {
  const int64_t pixel_groups = int64_t(g.N) * g.P * ceil_div(g.Q, kPixels);
  int KB = channels_per_thread(g.K);
  while (KB > 1 && pixel_groups * (g.K / KB) < kMinForwardThreads && g.K / (KB / 2) <= kThreads) {
    KB /= 2;
  }
  return KB;
}

// As many output pixels per block as kThreads threads cover: whole rows where
// they fit, and an input window within its budget.
ForwardLayout forward_layout(const ConvGeo& g, int KB, Tile& tile, bool channels_inner) {
  const int groups = g.K / KB;
  const int pixel_groups = std::max(1, kThreads / groups);
  int col_groups = static_cast<int>(std::min<int64_t>(pixel_groups, ceil_div(g.Q, kPixels)));
  int rows = std::max(1, std::min(pixel_groups / col_groups, g.P));
  const int64_t tiles_q = ceil_div(g.Q, int64_t(col_groups) * kPixels);
  while (rows > 1 && g.N * ceil_div(g.P, rows) * tiles_q < kMinForwardTiles) rows = (rows + 1) / 2;
  tile = fitted_tile(g, rows, col_groups * kPixels, kPixels);
  col_groups = tile.cols / kPixels;
  return {groups, col_groups, channels_inner};
}

GradLayout grad_layout(const ConvGeo& g) {
  const int groups = g.K / channels_per_thread(g.K);
  const int tap_groups = static_cast<int>(ceil_div(g.crs(), kTaps));
  const int units = groups * tap_groups;
  return {groups, tap_groups, units, std::max(1, kThreads / units)};
}

// As many whole rows as the gradient tile's budget holds (at least one pixel).
Tile grad_tile(const ConvGeo& g) {
  const int64_t per_block = std::clamp<int64_t>(ceil_div(int64_t(g.N) * g.P * g.Q, kMaxPartialBlocks),
                                                kMinGradTilePixels, kMaxGradTilePixels);
  const int64_t pixels =
      std::clamp<int64_t>(kGradTileBytes / (int64_t(sizeof(float)) * g.K), 1, per_block);
  const int cols = static_cast<int>(std::min<int64_t>(g.Q, pixels));
  const int rows = static_cast<int>(std::clamp<int64_t>(pixels / cols, 1, g.P));
  return fitted_tile(g, rows, cols, 1);
}

// y (N, K, P, Q) = the epilogue of conv(x (N, C, H, W), w (K, C, R, S)) for
// the geometry g; y_layout is y's Strided (its layout and alignment).
template <class S>
void launch_forward(View4<S> y, View4<const S> x, View4<const S> w, const ConvGeo& g,
                    const Strided& y_layout, const Epilogue<S>& epilogue, cudaStream_t stream) {
  const int KB = forward_channels(g);
  Tile tile{};
  const ForwardLayout layout = forward_layout(g, KB, tile, y_layout.strides[1] < y_layout.strides[3]);
  const int threads = layout.groups * layout.col_groups * tile.rows;
  const int blocks = static_cast<int>(std::min<int64_t>(tile.count(g), kMaxForwardBlocks));
  const size_t shared = sizeof(float) * g.crs() * g.K + input_tile_bytes(g, tile);
  const bool packed = layout.channels_inner && channel_packs_fit(y_layout, KB);
  visit_channels(KB, [&]<int V>() {
    visit_filter_width(g.S, [&]<int kS>() {
      if constexpr (kS > 0) {
        if (g.stride_w == 1) {
          small_forward_kernel<S, V, kS, true><<<blocks, threads, shared, stream>>>(
              y, x, w, g, tile, layout, epilogue, packed);
          return;
        }
      }
      small_forward_kernel<S, V, kS, false><<<blocks, threads, shared, stream>>>(y, x, w, g, tile, layout,
                                                                                  epilogue, packed);
    });
  });
}

}  // namespace

cudaError_t launch_conv_small_forward(const Strided& y, const Strided& x, const Strided& w,
                                      const Strided* bias, bool relu, const kernel::ConvParams& p,
                                      cudaStream_t stream) {
  if (y.numel() == 0) return cudaSuccess;
  visit_small(x.dtype, [&]<class S>() {
    const Epilogue<S> epilogue{bias ? bias->ptr<const S>() : nullptr, bias ? bias->strides[0] : 0, relu};
    launch_forward<S>(view4<S>(y), view4<const S>(x), view4<const S>(w), conv_geo(x, w, y, p), y,
                      epilogue, stream);
  });
  return cudaGetLastError();
}

// At stride 1, dx is the forward convolution of dy (K channels) with the
// filter transposed to (C, K, R, S) and flipped in R and S (a view with
// negative strides, from w's last tap), padded by R - 1 - pad_h, S - 1 - pad_w.
cudaError_t launch_conv_small_dgrad(const Strided& dx, const Strided& dy, const Strided& w,
                                    const kernel::ConvParams& p, cudaStream_t stream) {
  if (dx.numel() == 0) return cudaSuccess;
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  const int R = i32(w.sizes[2]), S = i32(w.sizes[3]);
  const ConvGeo g{i32(dy.sizes[0]), i32(dy.sizes[1]), i32(dy.sizes[2]), i32(dy.sizes[3]),
                  i32(w.sizes[1]),  R,                S,                i32(dx.sizes[2]),
                  i32(dx.sizes[3]), 1,                1,                R - 1 - i32(p.pad_h),
                  S - 1 - i32(p.pad_w)};
  visit_small(dx.dtype, [&]<class T>() {
    const View4<const T> flipped{w.ptr<const T>() + (R - 1) * w.strides[2] + (S - 1) * w.strides[3],
                                 w.strides[1], w.strides[0], -w.strides[2], -w.strides[3]};
    launch_forward<T>(view4<T>(dx), view4<const T>(dy), flipped, g, dx, Epilogue<T>{nullptr, 0, false},
                      stream);
  });
  return cudaGetLastError();
}

bool conv_small_forward_fits(int64_t K, int64_t C, int64_t R, int64_t S, int64_t stride_w) {
  const int64_t taps = C * R * S;
  // The smallest tile: one row of kPixels outputs, beside the filter.
  const int64_t smallest_window = C * R * ((kPixels - 1) * stride_w + S);
  return K / channels_per_thread(K) <= kThreads && int64_t(sizeof(float)) * K * taps <= kFilterBytes &&
         int64_t(sizeof(float)) * (K * taps + smallest_window) <= kFilterBytes + kInputTileBytes;
}

bool conv_small_fits(int64_t K, int64_t C, int64_t R, int64_t S, int64_t stride_w) {
  const int64_t units = K / channels_per_thread(K) * ceil_div(C * R * S, kTaps);
  return conv_small_forward_fits(K, C, R, S, stride_w) && units <= kThreads &&
         int64_t(sizeof(float)) * K <= kGradTileBytes;
}

int conv_small_wgrad_threads(const Strided& w_or_dw) {
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  const ConvGeo g{.C = i32(w_or_dw.sizes[1]), .K = i32(w_or_dw.sizes[0]), .R = i32(w_or_dw.sizes[2]),
                  .S = i32(w_or_dw.sizes[3])};
  return grad_layout(g).threads();
}

int64_t conv_small_wgrad_partials(const Strided& dy, const Strided& w_or_dw) {
  const int64_t pixels = dy.sizes[0] * dy.sizes[2] * dy.sizes[3];
  const int64_t K = w_or_dw.sizes[0];
  const int64_t filter = K * w_or_dw.sizes[1] * w_or_dw.sizes[2] * w_or_dw.sizes[3];
  return partial_blocks(pixels) * (filter + K);  // room for the bias gradient's K
}

cudaError_t launch_conv_small_wgrad(const Strided& dw, const Strided* db, const Strided& dy,
                                    const Strided& x, const kernel::ConvParams& p, float* partials,
                                    cudaStream_t stream) {
  if (dw.numel() == 0) return cudaSuccess;
  const ConvGeo g = conv_geo(x, dw, dy, p);
  const int64_t pixels = dy.sizes[0] * dy.sizes[2] * dy.sizes[3];
  if (pixels == 0) {
    if (db != nullptr) {
      if (const cudaError_t status = launch_fill(*db, 0.0, stream); status != cudaSuccess) return status;
    }
    return launch_fill(dw, 0.0, stream);
  }
  const int KJ = channels_per_thread(g.K);
  const int64_t blocks = partial_blocks(pixels);
  const GradLayout layout = grad_layout(g);
  const Tile tile = grad_tile(g);
  const int64_t tile_bytes = input_tile_bytes(g, tile) + int64_t(sizeof(float)) * tile.rows * tile.cols * g.K;
  const int64_t sums_bytes = int64_t(sizeof(float)) * layout.threads() * (KJ * kTaps + 1);
  const size_t shared = std::max(tile_bytes, sums_bytes);
  visit_small(x.dtype, [&]<class S>() {
    const bool packed = channel_packs_fit(dy, KJ);
    visit_channels(KJ, [&]<int V>() {
      small_wgrad_partial_kernel<S, V><<<static_cast<int>(blocks), layout.threads(), shared, stream>>>(
          view4<const S>(dy), view4<const S>(x), g, tile, layout, packed, db != nullptr, partials);
    });
    const int64_t outputs = dw.numel() + (db != nullptr ? g.K : 0);
    small_wgrad_sum_kernel<S><<<blocks_for(outputs * 32), kThreads, 0, stream>>>(
        view4<S>(dw), db != nullptr ? db->ptr<S>() : nullptr, db != nullptr ? db->strides[0] : 0,
        partials, blocks, g);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
