// File: core/cuda/conv_wgrad_mma.cu
// Tensor-core weight gradient for narrow layers (conv_wgrad_mma.h).
//
// As a GEMM: dw[k][tap][c] = sum over pixels l of dy[l][k] * x[window(l, tap)][c], M = K, N = taps * C
// and a reduction of N * P * Q pixels. A block takes whole output-row tiles of one image (TR rows, every
// column), stages the tile's dy rows and the input window under them in shared memory (a pitch of C + 8
// elements per pixel so that a fragment load's rows fall in distinct banks, padding as zeros, by cp.async
// into one of two buffers while the warps work on the other).
//
// The output splits into "columns" (one tap, 16 input channels) and groups of 16 output channels. A warp
// tile is KW channel groups x NB columns: per 16 pixels it loads KW A fragments (dy, by ldmatrix.trans:
// pixel-major rows hold 8 consecutive channels) and NB B fragments (the staged input at each pixel's
// window position, so any stride and padding costs nothing but the row addresses) and runs 2 * KW * NB
// mma.m16n8k16, keeping KW * NB * 8 float32 accumulators per lane across every tile of the block (float32
// operands: the same tile as 4 * KW * NB TF32 mma.m16n8k8 from per-lane loads, WarpTile32). Where a
// block has fewer warp tiles than warps, "pixel warps" take every PW-th 16 pixels of each tile with the
// same warp tiles, and add up in a fixed order through shared memory at the end. Pixels past the tile's
// end read zeros.
//
// The warp tiles split into grid.y slices (choose_slices weighs the partial sums' traffic against staging
// the tiles once per slice); the blocks along the tiles make one wave on the GPU (launch_for). Stage 2 sums
// the blocks' float32 partials per output in a fixed order. The plan depends on the shape and the GPU's
// model alone, so every run on one GPU gives the same bits, with no float atomics.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/cuda/conv_wgrad_mma_kernels.h"
#include "core/cuda/copy_kernels.h"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/shared_memory.cuh"
#include "core/cuda/view4.cuh"

namespace loom::cuda {

namespace {

constexpr int kPad = 8;                // elements after each staged pixel's channels
constexpr int kMaxTilePixels = 256;    // output pixels per tile, at most
// Warps per block. With up to 96 accumulators a lane, four warps let three blocks share an SM; eight
// took 34.5 us against 31.4 on a 16-channel 3x3 layer and 29.5 against 28.1 on a 32-channel one (H200,
// batch 512, bf16).
constexpr int kMaxWarps = 4;
// Both buffers and the zero row: past the default 48 KiB, within what sm_80 to sm_90 (99 KiB on sm_86/89)
// let a block opt in to.
constexpr int64_t kMaxSharedBytes = 96 * 1024;
constexpr int64_t kTargetBlocks = 528;  // what choose_slices weighs slices at; launch_for sets the blocks
constexpr double kStagingWeight = 3;    // bytes staged from L2 against the partials' trips to DRAM
constexpr int64_t kMaxPartials = 4 << 20;  // float32 partial sums, 16 MiB
constexpr int kSumWarps = 16;

// A warp tile: kw groups of 16 output channels x nb columns (tap, 16 input channels). The table is every
// shape a kernel is built for; a shape takes the widest kw that divides K / 16, then the nb that gives the
// most useful columns per tile. Wider tiles reuse each fragment more but hold more registers: with up to
// 9 columns (164 registers a lane) the 16-channel layer above took 34.1 us against 31.4.
struct WarpShape {
  int kw, nb;
};
constexpr WarpShape kWarpShapes[] = {{4, 3}, {4, 2}, {4, 1}, {2, 3}, {2, 2}, {2, 1}, {1, 3}, {1, 2}, {1, 1}};

struct Geo {
  int N, C, H, W, K, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w;
  DType dtype;  // bfloat16, float16 or float32 (TF32 products)
};

// The tile and its staged window, the warp tiles and how the grid splits them.
struct Plan {
  int rows;                 // TR output rows per tile
  int in_rows, in_cols;     // the input window under a tile
  int tiles_per_image;
  int buffer_elems;         // one buffer: the window, then the tile's dy rows
  int kw, nb;               // the warp tile (WarpShape)
  int columns, col_units;   // (tap, 16 input channels) columns; warp tiles along them
  int units;                // warp tiles in all: K / 16 / kw * col_units
  int slice_units, slices;  // warp tiles per slice (grid.y), one per job warp of a block
  int pixel_warps, warps;   // warps per warp tile, splitting the pixels; in all
  int64_t blocks;           // along the tiles: each writes one set of partials
  int64_t shared_bytes;

  __host__ __device__ int64_t tiles(const Geo& g) const { return int64_t(g.N) * tiles_per_image; }
  __host__ __device__ int64_t outputs(const Geo& g) const { return int64_t(g.K) * g.R * g.S * g.C; }
};

// Blocks along the tiles, at most: one tile each, within the partial sums' budget.
int64_t max_blocks(const Plan& plan, const Geo& g) {
  return std::min(plan.tiles(g), std::max<int64_t>(1, kMaxPartials / plan.outputs(g)));
}

int64_t buffer_elems_for(const Geo& g, int rows) {
  const int64_t in_rows = int64_t(rows - 1) * g.stride_h + g.R;
  const int64_t in_cols = int64_t(g.Q - 1) * g.stride_w + g.S;
  return in_rows * in_cols * (g.C + kPad) + ceil_div(int64_t(rows) * g.Q, 16) * 16 * (g.K + kPad);
}

// Two buffers and the zero row; for float32 also each tile pixel's place in the window (WarpTile32).
int64_t staging_bytes(const Geo& g, int rows) {
  const int64_t table = g.dtype == DType::Float32 ? int64_t(sizeof(int)) * ceil_div(int64_t(rows) * g.Q, 16) * 16 : 0;
  return int64_t(element_size(g.dtype)) * (2 * buffer_elems_for(g, rows) + g.C + kPad) + table;
}

void choose_warp_tile(Plan& plan, const Geo& g) {
  const int kgroups = g.K / 16;
  plan.kw = kgroups % 4 == 0 ? 4 : kgroups % 2 == 0 ? 2 : 1;
  plan.columns = g.R * g.S * (g.C / 16);
  double best = 0;  // useful columns per warp tile: the last along the columns may use fewer
  for (const WarpShape& shape : kWarpShapes) {  // nb falls within a kw: ties go to the narrower
    if (shape.kw != plan.kw) continue;
    const double useful = double(plan.columns) / double(ceil_div(plan.columns, shape.nb));
    if (useful >= best) {
      best = useful;
      plan.nb = shape.nb;
    }
  }
  plan.col_units = static_cast<int>(ceil_div(plan.columns, plan.nb));
  plan.units = kgroups / plan.kw * plan.col_units;
}

// Each block along the tiles writes and stage 2 reads a set of partials; each slice stages every tile
// again, mostly from L2. The cheapest number of slices for about kTargetBlocks blocks, each with at most
// kMaxWarps warps; the warps a slice's warp tiles leave split the pixels. launch_for sets the blocks.
void choose_slices(Plan& plan, const Geo& g) {
  const double staged = 2.0 * (double(plan.tiles(g)) * plan.in_rows * plan.in_cols * g.C +
                               double(g.N) * g.P * g.Q * g.K);  // bytes, once per slice
  double best = std::numeric_limits<double>::infinity();
  for (int slices = 1; slices <= plan.units; ++slices) {
    const int per = static_cast<int>(ceil_div(plan.units, slices));
    if (per > kMaxWarps || ceil_div(plan.units, per) != slices) continue;
    const int64_t blocks = std::clamp<int64_t>(ceil_div(kTargetBlocks, slices), 1, max_blocks(plan, g));
    const double cost = 8.0 * double(blocks) * double(plan.outputs(g)) + slices * staged / kStagingWeight;
    if (cost < best) {
      best = cost;
      plan.slices = slices;
      plan.slice_units = per;
    }
  }
  const int chunks = static_cast<int>(ceil_div(int64_t(plan.rows) * g.Q, 16));
  plan.pixel_warps = std::clamp(kMaxWarps / plan.slice_units, 1, chunks);
  plan.warps = plan.slice_units * plan.pixel_warps;
}

// rows == 0 when no tile of one output row fits the shared memory.
Plan make_plan(const Geo& g) {
  Plan plan{};
  int rows = std::clamp(kMaxTilePixels / std::max(g.Q, 1), 1, std::max(g.P, 1));
  while (rows > 1 && staging_bytes(g, rows) > kMaxSharedBytes) --rows;
  if (staging_bytes(g, rows) > kMaxSharedBytes) return plan;
  plan.rows = rows;
  plan.in_rows = (rows - 1) * g.stride_h + g.R;
  plan.in_cols = (g.Q - 1) * g.stride_w + g.S;
  plan.tiles_per_image = static_cast<int>(ceil_div(g.P, rows));
  plan.buffer_elems = static_cast<int>(buffer_elems_for(g, rows));
  choose_warp_tile(plan, g);
  choose_slices(plan, g);
  // The pixel warps' sums meet in the staging buffers once every tile is done.
  const int64_t meeting = plan.pixel_warps > 1 ? int64_t(plan.slice_units) * plan.kw * plan.nb * 8 * 32 * 4 : 0;
  plan.shared_bytes = std::max(staging_bytes(g, rows), meeting);
  return plan;
}

Geo geo_of(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p) {
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  return {i32(x.sizes[0]),   i32(x.sizes[1]),   i32(x.sizes[2]),   i32(x.sizes[3]), i32(dw.sizes[0]),
          i32(dw.sizes[2]),  i32(dw.sizes[3]),  i32(dy.sizes[2]),  i32(dy.sizes[3]), i32(p.stride_h),
          i32(p.stride_w),   i32(p.pad_h),      i32(p.pad_w),    x.dtype};
}

__device__ inline uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// 16 bytes from global to shared memory without a register round trip; zeros where !valid.
__device__ inline void copy_async_16(void* shared, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :
               : "r"(shared_address(shared)), "l"(global), "r"(valid ? 16 : 0));
}

__device__ inline void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int Pending>
__device__ inline void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

template <class S>
__device__ inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// float32 to TF32, rounded to nearest as cuDNN's TF32 convolutions round (the mma alone would drop the low bits).
__device__ inline uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

__device__ inline void mma_1688_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Where a tile is: image n, first output row p0, its pixels (rows * Q, fewer at the image's bottom).
struct TileAt {
  int n, p0, pixels, padded;  // padded: pixels rounded up to the 16 of an mma
};

__device__ inline TileAt tile_at(int64_t tile, const Geo& g, const Plan& plan) {
  const int n = static_cast<int>(tile / plan.tiles_per_image);
  const int p0 = static_cast<int>(tile % plan.tiles_per_image) * plan.rows;
  const int pixels = min(plan.rows, g.P - p0) * g.Q;
  return {n, p0, pixels, (pixels + 15) / 16 * 16};
}

// Element i = pixel * groups + group of a (pixels, groups) walk that a block's threads take with a stride
// of blockDim.x: each step adds the stride's parts and carries, so nothing divides past the start.
struct Walk {
  int pixel, group;
  int groups, step_pixel, step_group;

  __device__ Walk(int start, int step, int groups_)
      : pixel(start / groups_), group(start % groups_), groups(groups_), step_pixel(step / groups_),
        step_group(step % groups_) {}
  __device__ void advance() {
    group += step_group;
    const int carry = group >= groups ? 1 : 0;
    group -= carry * groups;
    pixel += step_pixel + carry;
  }
};

// Starts copying the tile's input window (zeros outside the image) and dy rows (zeros past the tile)
// into a buffer, 16 bytes (V channels) at a time, as one cp.async group.
template <class S>
__device__ void stage_tile(S* buffer, const S* x, const S* dy, const Geo& g, const Plan& plan, const TileAt& t) {
  constexpr int V = kPackOf<S>;
  const int groups = g.C / V, pitch = g.C + kPad, dy_pitch = g.K + kPad, window = plan.in_rows * plan.in_cols;
  const int h0 = t.p0 * g.stride_h - g.pad_h;
  const S* image = x + int64_t(t.n) * g.H * g.W * g.C;
  // A thread keeps one window column and channel group down every window row: one division per column.
  for (int j = threadIdx.x; j < plan.in_cols * groups; j += blockDim.x) {
    const int col = j / groups, group = j % groups, w = col - g.pad_w;
    const bool w_inside = w >= 0 && w < g.W;
    S* to = buffer + col * pitch + group * V;
    int64_t from = (int64_t(h0) * g.W + w) * g.C + group * V;
    for (int h = h0; h < h0 + plan.in_rows; ++h, to += plan.in_cols * pitch, from += int64_t(g.W) * g.C) {
      const bool inside = w_inside && h >= 0 && h < g.H;
      copy_async_16(to, inside ? image + from : x, inside);
    }
  }
  S* dys = buffer + window * pitch;
  const int dv = g.K / V;
  const S* dy_tile = dy + (int64_t(t.n) * g.P + t.p0) * g.Q * g.K;  // the tile's rows are consecutive
  Walk d(threadIdx.x, blockDim.x, dv);  // (tile pixel, V-channel group)
  for (int i = threadIdx.x; i < t.padded * dv; i += blockDim.x, d.advance()) {
    const bool inside = d.pixel < t.pixels;
    copy_async_16(dys + d.pixel * dy_pitch + d.group * V, inside ? dy_tile + int64_t(i) * V : dy, inside);
  }
  copy_async_commit();
}

// One warp's sums of its tile of the output (Plan::kw x Plan::nb), kept in registers across every tile of
// the block, and where they go.
template <int KW, int NB>
struct WarpSums {
  static constexpr int kAcc = KW * NB * 8;
  int unit, lane;
  float acc[KW][NB][2][4] = {};

  __device__ explicit WarpSums(int unit_) : unit(unit_), lane(threadIdx.x % 32) {}
  __device__ int k0(const Plan& plan) const { return unit / plan.col_units * KW * 16; }
  __device__ int column(int j, const Plan& plan) const { return unit % plan.col_units * NB + j; }
  // Columns past the last repeat it: their sums are not stored.
  __device__ int loaded_column(int j, const Plan& plan) const { return min(column(j, plan), plan.columns - 1); }

  // Pixel warps 1, 2, ... add their sums into pixel warp 0's in order through `meeting` (a float per
  // accumulator and lane for each job warp), which then stores. Every warp of the block calls it.
  __device__ void meet(float* meeting, int job, int pw, bool working, const Plan& plan) {
    float* flat = &acc[0][0][0][0];
    float* slot = meeting + job * kAcc * 32;
    for (int from = 1; from < plan.pixel_warps; ++from) {
      if (working && pw == from) {
#pragma unroll
        for (int e = 0; e < kAcc; ++e) slot[e * 32 + lane] = flat[e];
      }
      __syncthreads();
      if (working && pw == 0) {
#pragma unroll
        for (int e = 0; e < kAcc; ++e) flat[e] += slot[e * 32 + lane];
      }
      __syncthreads();
    }
  }

  // Accumulator element e of n-tile t: row (output channel) lane / 4 (+ 8 for e >= 2), column (input
  // channel) t * 8 + lane % 4 * 2 (+ 1 for odd e); out[(k * R * S + tap) * C + c].
  __device__ void store(float* out, const Geo& g, const Plan& plan) const {
    const int cgroups = g.C / 16;
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int col = column(j, plan);
      if (col >= plan.columns) continue;
      const int tap = col / cgroups, c0 = col % cgroups * 16;
#pragma unroll
      for (int i = 0; i < KW; ++i) {
#pragma unroll
        for (int t = 0; t < 2; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int k = k0(plan) + i * 16 + lane / 4 + (e >= 2 ? 8 : 0);
            const int c = c0 + t * 8 + lane % 4 * 2 + (e & 1);
            out[(int64_t(k) * g.R * g.S + tap) * g.C + c] = acc[i][j][t][e];
          }
        }
      }
    }
  }
};

// Where column col's tap puts its window pixels, from a tile pixel's place in the staged window.
__device__ inline int tap_offset(int col, const Geo& g, const Plan& plan) {
  const int tap = col / (g.C / 16);
  return (tap / g.S * plan.in_cols + tap % g.S) * (g.C + kPad);
}

// A warp tile of 16-bit operands: per 16 pixels, KW A fragments (dy, by ldmatrix.trans: pixel-major rows
// hold 8 consecutive channels) and NB B fragments (the staged input at each pixel's window position), and
// 2 * KW * NB mma.m16n8k16.
template <class S, int KW, int NB>
struct WarpTile16 {
  WarpSums<KW, NB> sums;
  int b_pixel, b_channel;
  int a_offset;       // the first channel group's place in a staged dy row
  int b_offset[NB];   // each column's place from a window pixel

  // ldmatrix row addresses: lane / 8 picks the 8x8 matrix, lane % 8 its row (a pixel).
  __device__ WarpTile16(int unit, const Geo& g, const Plan& plan) : sums(unit) {
    const int mat = sums.lane / 8, row = sums.lane % 8;
    b_pixel = row + (mat & 1) * 8;
    b_channel = (mat >> 1) * 8;
    a_offset = (row + (mat >> 1) * 8) * (g.K + kPad) + sums.k0(plan) + (mat & 1) * 8;
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int col = sums.loaded_column(j, plan);
      b_offset[j] = tap_offset(col, g, plan) + col % (g.C / 16) * 16 + b_channel;
    }
  }

  // 16 pixels: a_row is their staged dy, b(j) the address of column j's B rows for this lane.
  template <class BRow>
  __device__ void chunk(const S* a_row, const BRow& b) {
    uint32_t a[KW][4];
#pragma unroll
    for (int i = 0; i < KW; ++i) ldmatrix_x4_trans(a[i], a_row + a_offset + i * 16);
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, b(j));
#pragma unroll
      for (int i = 0; i < KW; ++i) {
        mma_16816<S>(sums.acc[i][j][0], a[i], bf[0], bf[1]);
        mma_16816<S>(sums.acc[i][j][1], a[i], bf[2], bf[3]);
      }
    }
  }

  // Adds every pixel_warps-th 16 pixels of a staged tile (window xs, dy rows dys) from pixel 16 * pw.
  __device__ void sum_tile(const S* xs, const S* dys, const S* zero_row, const int*, const TileAt& t, const Geo& g,
                           const Plan& plan, int pw) {
    const int step = plan.pixel_warps * 16, step_rows = step / g.Q, step_cols = step % g.Q;
    int p = (pw * 16 + b_pixel) / g.Q, q = (pw * 16 + b_pixel) % g.Q;  // this lane's B pixel
    const int full = t.pixels / 16 * 16;  // chunks whose every pixel is in the tile
    int base = pw * 16;
    for (; base < full; base += step) {
      const S* at = xs + (p * g.stride_h * plan.in_cols + q * g.stride_w) * (g.C + kPad);
      chunk(dys + base * (g.K + kPad), [&](int j) { return at + b_offset[j]; });
      p += step_rows;
      q += step_cols;
      if (q >= g.Q) {
        q -= g.Q;
        ++p;
      }
    }
    if (base != full || full == t.pixels) return;
    // The tile's last, partial 16 pixels (this warp's turn): lanes past the end read the zero row.
    const bool inside = base + b_pixel < t.pixels;
    const S* at = xs + (p * g.stride_h * plan.in_cols + q * g.stride_w) * (g.C + kPad);
    chunk(dys + base * (g.K + kPad), [&](int j) {
      const int col = sums.loaded_column(j, plan);
      return inside ? at + b_offset[j] : zero_row + col % (g.C / 16) * 16 + b_channel;
    });
  }
};

// A warp tile of float32 operands, TF32 products: ldmatrix.trans moves 16-bit elements only, so each lane
// loads its fragment elements itself. Per 8 pixels (an mma.m16n8k8's reduction), lane l takes pixels
// l % 4 and l % 4 + 4 and channels l / 4 and l / 4 + 8 of dy (A), and the same pixels of the window at
// channel l / 4 of each 8 (B). Pitches of C + 8 and K + 8 floats put the four pixels of a load in distinct
// banks. A tile pixel's window place comes from `table` (the same for every tile); pixels past the tile
// read the zero row.
template <int KW, int NB>
struct WarpTile32 {
  WarpSums<KW, NB> sums;
  int a_offset;        // this lane's first channel in a staged dy row
  int taps[NB];        // each column's tap, as tap_offset
  int channels[NB];    // each column's first channel for this lane

  __device__ WarpTile32(int unit, const Geo& g, const Plan& plan) : sums(unit) {
    a_offset = sums.k0(plan) + sums.lane / 4;
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int col = sums.loaded_column(j, plan);
      taps[j] = tap_offset(col, g, plan);
      channels[j] = col % (g.C / 16) * 16 + sums.lane / 4;
    }
  }

  // 8 pixels: dy0 / dy1 are this lane's two pixels' staged dy rows, x0 / x1 their window places (the zero
  // row where tap0 / tap1 is 0, which drops the tap offset).
  __device__ void step(const float* dy0, const float* dy1, const float* x0, const float* x1, int tap0, int tap1) {
    uint32_t a[KW][4];
#pragma unroll
    for (int i = 0; i < KW; ++i) {
      a[i][0] = to_tf32(dy0[a_offset + i * 16]);
      a[i][1] = to_tf32(dy0[a_offset + i * 16 + 8]);
      a[i][2] = to_tf32(dy1[a_offset + i * 16]);
      a[i][3] = to_tf32(dy1[a_offset + i * 16 + 8]);
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const float* b0 = x0 + (taps[j] & tap0) + channels[j];
      const float* b1 = x1 + (taps[j] & tap1) + channels[j];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const uint32_t lo = to_tf32(b0[n * 8]), hi = to_tf32(b1[n * 8]);
#pragma unroll
        for (int i = 0; i < KW; ++i) mma_1688_tf32(sums.acc[i][j][n], a[i], lo, hi);
      }
    }
  }

  // Adds every pixel_warps-th 16 pixels of a staged tile (window xs, dy rows dys) from pixel 16 * pw.
  __device__ void sum_tile(const float* xs, const float* dys, const float* zero_row, const int* table,
                           const TileAt& t, const Geo& g, const Plan& plan, int pw) {
    const int dy_pitch = g.K + kPad, first = sums.lane % 4;
    for (int base = pw * 16; base < t.padded; base += plan.pixel_warps * 16) {
      const float* x[4];
      int tap[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int pixel = base + first + 4 * u;
        const bool inside = pixel < t.pixels;
        x[u] = inside ? xs + table[pixel] : zero_row;
        tap[u] = inside ? -1 : 0;
      }
      const float* dy = dys + (base + first) * dy_pitch;
      step(dy, dy + 4 * dy_pitch, x[0], x[1], tap[0], tap[1]);
      step(dy + 8 * dy_pitch, dy + 12 * dy_pitch, x[2], x[3], tap[2], tap[3]);
    }
  }
};

template <class S, int KW, int NB>
using WarpTile = std::conditional_t<std::is_same_v<S, float>, WarpTile32<KW, NB>, WarpTile16<S, KW, NB>>;

// Stage 1: block (b, slice) sums tiles [b * tiles / blocks, (b + 1) * tiles / blocks) for the slice's warp
// tiles into partials[b][(k * R * S + tap) * C + c]. Warp w is job warp w % slice_units (its warp tile)
// and pixel warp w / slice_units.
template <class S, int KW, int NB>
__global__ void wgrad_mma_partial_kernel(const S* x, const S* dy, Geo g, Plan plan, float* partials) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  S* buffers = reinterpret_cast<S*>(shared_raw);  // [2][buffer_elems]
  S* zero_row = buffers + 2 * plan.buffer_elems;
  int* table = reinterpret_cast<int*>(zero_row + g.C + kPad);  // float32: each tile pixel's window place
  const int window = plan.in_rows * plan.in_cols;
  for (int i = threadIdx.x; i < g.C + kPad; i += blockDim.x) zero_row[i] = from_compute<S>(0.0f);
  if constexpr (std::is_same_v<S, float>) {
    for (int i = threadIdx.x; i < plan.rows * g.Q; i += blockDim.x) {
      table[i] = (i / g.Q * g.stride_h * plan.in_cols + i % g.Q * g.stride_w) * (g.C + kPad);
    }
  }
  const int warp = threadIdx.x / 32, job = warp % plan.slice_units, pw = warp / plan.slice_units;
  const int unit = blockIdx.y * plan.slice_units + job;
  const bool working = unit < plan.units;
  WarpTile<S, KW, NB> tile(min(unit, plan.units - 1), g, plan);
  const int64_t tiles = plan.tiles(g);
  const int64_t first = tiles * blockIdx.x / gridDim.x, last = tiles * (blockIdx.x + 1) / gridDim.x;
  stage_tile(buffers, x, dy, g, plan, tile_at(first, g, plan));
  for (int64_t at = first; at < last; ++at) {
    const S* xs = buffers + (at - first) % 2 * plan.buffer_elems;
    if (at + 1 < last) {  // the next tile streams in while this one is summed
      stage_tile(buffers + (at + 1 - first) % 2 * plan.buffer_elems, x, dy, g, plan, tile_at(at + 1, g, plan));
      copy_async_wait<1>();
    } else {
      copy_async_wait<0>();
    }
    __syncthreads();
    if (working) {
      tile.sum_tile(xs, xs + window * (g.C + kPad), zero_row, table, tile_at(at, g, plan), g, plan, pw);
    }
    __syncthreads();  // this buffer's readers are done before the next iteration refills it
  }
  tile.sums.meet(reinterpret_cast<float*>(shared_raw), job, pw, working, plan);
  if (working && pw == 0) tile.sums.store(partials + int64_t(blockIdx.x) * plan.outputs(g), g, plan);
}

// Stage 2: 32 outputs per block; warp w sums blocks w, w + kSumWarps, ... in order, then one warp adds
// the warps' sums in order and stores dw (K, C, R, S) in its dtype and strides.
template <class S>
__global__ void wgrad_mma_sum_kernel(View4<S> dw, const float* partials, int64_t blocks, Geo g) {
  __shared__ float sums[kSumWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t outputs = int64_t(g.K) * g.R * g.S * g.C;
  const int64_t o = int64_t(blockIdx.x) * 32 + lane;
  float sum = 0.0f;
  if (o < outputs) {
#pragma unroll 8
    for (int64_t b = warp; b < blocks; b += kSumWarps) sum += partials[b * outputs + o];
  }
  sums[warp][lane] = sum;
  __syncthreads();
  if (warp != 0 || o >= outputs) return;
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kSumWarps; ++w) total += sums[w][lane];
  const int c = static_cast<int>(o % g.C), tap = static_cast<int>(o / g.C % (g.R * g.S));
  const int k = static_cast<int>(o / (int64_t(g.C) * g.R * g.S));
  dw(k, c, tap / g.S, tap % g.S) = from_compute<S>(total);
}

template <class S>
using PartialKernel = void(const S*, const S*, Geo, Plan, float*);

// The kernel of kWarpShapes' row that the plan chose, allowed kMaxSharedBytes (every plan fits them).
template <class S, size_t... I>
PartialKernel<S>* kernel_for(const Plan& plan, cudaError_t& status, std::index_sequence<I...>) {
  PartialKernel<S>* kernel = nullptr;
  ((kWarpShapes[I].kw == plan.kw && kWarpShapes[I].nb == plan.nb &&
    (kernel = wgrad_mma_partial_kernel<S, kWarpShapes[I].kw, kWarpShapes[I].nb>, true)) ||
   ...);
  status = kernel == nullptr ? cudaErrorInvalidConfiguration : allow_shared_memory(kernel, kMaxSharedBytes);
  return status == cudaSuccess ? kernel : nullptr;
}

// A plan and the kernel that runs it.
template <class S>
struct Launch {
  Plan plan;
  PartialKernel<S>* kernel = nullptr;  // null where no tile fits (plan.rows == 0) or the driver refused
};

// The plan with its blocks along the tiles: one wave of blocks on the current GPU, as few as finish it in
// as many tiles each (so the fewest partials), within the partials' budget. The bits depend on the shape
// and the GPU's model; every run on one gives the same.
template <class S>
Launch<S> launch_for(const Geo& g, cudaError_t& status) {
  Launch<S> launch{make_plan(g)};
  Plan& plan = launch.plan;
  status = cudaSuccess;
  if (plan.rows == 0) return launch;
  PartialKernel<S>* kernel = kernel_for<S>(plan, status, std::make_index_sequence<std::size(kWarpShapes)>());
  if (status != cudaSuccess) return launch;
  const int64_t slots = resident_blocks(kernel, plan.warps * 32, plan.shared_bytes, status);
  if (status != cudaSuccess) return launch;
  const int64_t tiles = plan.tiles(g);
  const int64_t blocks = std::clamp<int64_t>(slots / plan.slices, 1, max_blocks(plan, g));
  plan.blocks = ceil_div(tiles, ceil_div(tiles, blocks));
  launch.kernel = kernel;
  return launch;
}

template <class S>
cudaError_t launch_typed(const Strided& dw, const Strided& dy, const Strided& x, const Geo& g, float* partials,
                         cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  const Launch<S> launch = launch_for<S>(g, status);
  if (status != cudaSuccess) return status;
  if (launch.kernel == nullptr) return cudaErrorInvalidConfiguration;
  const Plan& plan = launch.plan;
  const dim3 grid(static_cast<unsigned>(plan.blocks), static_cast<unsigned>(plan.slices));
  launch.kernel<<<grid, plan.warps * 32, static_cast<size_t>(plan.shared_bytes), stream>>>(
      x.ptr<S>(), dy.ptr<S>(), g, plan, partials);
  if (status = cudaGetLastError(); status != cudaSuccess) return status;
  const int sum_blocks = static_cast<int>(ceil_div(plan.outputs(g), 32));
  wgrad_mma_sum_kernel<S><<<sum_blocks, kSumWarps * 32, 0, stream>>>(view4<S>(dw), partials, plan.blocks, g);
  return cudaGetLastError();
}

// fn.template operator()<S>() for the operands' storage type.
template <class Fn>
auto by_dtype(const Geo& g, Fn&& fn) {
  if (g.dtype == DType::BFloat16) return fn.template operator()<__nv_bfloat16>();
  if (g.dtype == DType::Float16) return fn.template operator()<__half>();
  return fn.template operator()<float>();
}

}  // namespace

bool conv_wgrad_mma_fits(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p) {
  return make_plan(geo_of(dw, dy, x, p)).rows > 0;
}

int64_t conv_wgrad_mma_partials(const Strided& dw, const Strided& dy, const Strided& x,
                                const kernel::ConvParams& p) {
  const Geo g = geo_of(dw, dy, x, p);
  cudaError_t status = cudaSuccess;
  const Plan plan = by_dtype(g, [&]<class S>() { return launch_for<S>(g, status).plan; });
  return status == cudaSuccess ? plan.blocks * plan.outputs(g) : 0;
}

cudaError_t launch_conv_wgrad_mma(const Strided& dw, const Strided& dy, const Strided& x,
                                  const kernel::ConvParams& p, float* partials, cudaStream_t stream) {
  if (dw.numel() == 0) return cudaSuccess;
  if (dy.numel() == 0) return launch_fill(dw, 0.0, stream);
  const Geo g = geo_of(dw, dy, x, p);
  return by_dtype(g, [&]<class S>() { return launch_typed<S>(dw, dy, x, g, partials, stream); });
}

}  // namespace loom::cuda
