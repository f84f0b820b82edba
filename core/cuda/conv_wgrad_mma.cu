// File: core/cuda/conv_wgrad_mma.cu
// Tensor-core weight gradient for narrow layers (conv_wgrad_mma.h).
//
// As a GEMM: dw[k][tap][c] = sum over pixels l of dy[l][k] * x[window(l, tap)][c], M = K, N = taps * C
// and a reduction of N * P * Q pixels. A block takes whole output-row tiles of one image (TR rows, every
// column), stages the tile's dy rows and the input window under them in shared memory (16-bit, a pitch of
// C + 8 elements per pixel so that ldmatrix's eight rows fall in distinct banks, padding as zeros, by
// cp.async into one of two buffers while the warps work on the other), and its warps walk the tile 16
// pixels at a time. A warp owns JW "jobs": 16 output channels x one tap x 16
// input channels, two mma.m16n8k16 accumulators each, kept in registers across every tile of the block.
// A fragments come from the staged dy by ldmatrix.trans (pixel-major rows hold 8 consecutive channels),
// B fragments likewise from the staged input at each pixel's window position, so any stride and padding
// costs nothing but the row addresses. Pixels past the tile's end read a zero row.
//
// The jobs split into grid.y slices where the partial sums' budget leaves too few blocks along the
// tiles. Stage 2 sums the blocks' float32 partials per output in a fixed order; the block counts depend
// on the shape alone, so every run and every GPU gives the same bits, with no float atomics.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda/conv_wgrad_mma_kernels.h"
#include "core/cuda/copy_kernels.h"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/view4.cuh"

namespace loom::cuda {

namespace {

constexpr int kPad = 8;                    // elements after each staged pixel's channels
constexpr int kMaxTilePixels = 128;        // output pixels per tile, at most
constexpr int kMaxWarps = 12;              // per block
constexpr int kMaxJobsPerWarp = 8;         // 16 floats of accumulators each
constexpr int64_t kMaxSharedBytes = 48 * 1024;  // both buffers and the zero row
constexpr int64_t kTargetBlocks = 384;     // about three per SM of an H100: fixed, so the bits are too
constexpr int64_t kMaxPartials = 4 << 20;  // float32 partial sums, 16 MiB
constexpr int kSumWarps = 8;

struct Geo {
  int N, C, H, W, K, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w;
};

// The tile and its staged window, the jobs and how the grid splits them.
struct Plan {
  int rows;                 // TR output rows per tile
  int in_rows, in_cols;     // the input window under a tile
  int tiles_per_image;
  int buffer_elems;         // one buffer: the window, then the tile's dy rows
  int jobs, jobs_per_warp, warps, block_jobs, slices;
  int64_t blocks;           // along the tiles: each writes one set of partials
  int64_t shared_bytes;

  __host__ __device__ int64_t tiles(const Geo& g) const { return int64_t(g.N) * tiles_per_image; }
  __host__ __device__ int64_t outputs(const Geo& g) const { return int64_t(g.K) * g.R * g.S * g.C; }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t buffer_elems_for(const Geo& g, int rows) {
  const int64_t in_rows = int64_t(rows - 1) * g.stride_h + g.R;
  const int64_t in_cols = int64_t(g.Q - 1) * g.stride_w + g.S;
  return in_rows * in_cols * (g.C + kPad) + ceil_div(int64_t(rows) * g.Q, 16) * 16 * (g.K + kPad);
}

// Two buffers and the zero row.
int64_t shared_bytes_for(const Geo& g, int rows) { return 2 * (2 * buffer_elems_for(g, rows) + g.C + kPad); }

// The jobs per warp and warps of a block that takes block_jobs jobs.
void split_jobs(Plan& plan, int block_jobs) {
  plan.jobs_per_warp = kMaxJobsPerWarp;
  for (int jw : {1, 2, 4}) {
    if (ceil_div(block_jobs, jw) <= kMaxWarps) {
      plan.jobs_per_warp = jw;
      break;
    }
  }
  plan.block_jobs = std::min(block_jobs, kMaxWarps * plan.jobs_per_warp);
  plan.warps = static_cast<int>(ceil_div(plan.block_jobs, plan.jobs_per_warp));
  plan.slices = static_cast<int>(ceil_div(plan.jobs, plan.block_jobs));
}

// rows == 0 when no tile of one output row fits the shared memory.
Plan make_plan(const Geo& g) {
  Plan plan{};
  int rows = std::clamp(kMaxTilePixels / std::max(g.Q, 1), 1, std::max(g.P, 1));
  while (rows > 1 && shared_bytes_for(g, rows) > kMaxSharedBytes) --rows;
  if (shared_bytes_for(g, rows) > kMaxSharedBytes) return plan;
  plan.rows = rows;
  plan.in_rows = (rows - 1) * g.stride_h + g.R;
  plan.in_cols = (g.Q - 1) * g.stride_w + g.S;
  plan.tiles_per_image = static_cast<int>(ceil_div(g.P, rows));
  plan.buffer_elems = static_cast<int>(buffer_elems_for(g, rows));
  plan.shared_bytes = shared_bytes_for(g, rows);
  plan.jobs = g.K / 16 * g.R * g.S * (g.C / 16);
  const int64_t by_partials = std::max<int64_t>(1, kMaxPartials / plan.outputs(g));
  plan.blocks = std::min({plan.tiles(g), by_partials, kTargetBlocks});
  // Fewer blocks along the tiles than the target: the jobs split over more slices instead.
  const int64_t want_slices = std::clamp<int64_t>(ceil_div(kTargetBlocks, plan.blocks), 1, plan.jobs);
  split_jobs(plan, static_cast<int>(ceil_div(plan.jobs, want_slices)));
  return plan;
}

Geo geo_of(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p) {
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  return {i32(x.sizes[0]),   i32(x.sizes[1]),   i32(x.sizes[2]),   i32(x.sizes[3]), i32(dw.sizes[0]),
          i32(dw.sizes[2]),  i32(dw.sizes[3]),  i32(dy.sizes[2]),  i32(dy.sizes[3]), i32(p.stride_h),
          i32(p.stride_w),   i32(p.pad_h),      i32(p.pad_w)};
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

// A job's place in the filter: 16 output channels from k0, one tap (r, s), 16 input channels from c0.
struct Job {
  int k0, r, s, c0;
  bool valid;
};

__device__ inline Job job_of(int job, int jobs, const Geo& g) {
  const int cgroups = g.C / 16, taps = g.R * g.S;
  const int j = min(job, jobs - 1);
  const int cg = j % cgroups, tap = j / cgroups % taps, kt = j / (cgroups * taps);
  return {kt * 16, tap / g.S, tap % g.S, cg * 16, job < jobs};
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

// Element i = (row * cols + col) * groups + group of a (rows, cols, groups) walk that a block's threads
// take with a stride of blockDim.x: each step adds the stride's parts and carries, so nothing divides
// past the start.
struct Walk {
  int row, col, group;
  int cols, groups, step_row, step_col, step_group;

  __device__ Walk(int start, int step, int cols_, int groups_) : cols(cols_), groups(groups_) {
    group = start % groups;
    row = start / groups / cols;
    col = start / groups % cols;
    step_group = step % groups;
    step_row = step / groups / cols;
    step_col = step / groups % cols;
  }
  __device__ int pixel() const { return row * cols + col; }
  __device__ void advance() {
    group += step_group;
    const int carry = group >= groups ? 1 : 0;
    group -= carry * groups;
    col += step_col + carry;
    row += step_row;
    if (col >= cols) {
      col -= cols;
      ++row;
    }
  }
};

// Starts copying the tile's input window (zeros outside the image) and dy rows (zeros past the tile)
// into a buffer, 16 bytes (8 channels) at a time, as one cp.async group.
template <class S>
__device__ void stage_tile(S* buffer, const S* x, const S* dy, const Geo& g, const Plan& plan, const TileAt& t) {
  const int xv = g.C / 8, window = plan.in_rows * plan.in_cols;
  const int h0 = t.p0 * g.stride_h - g.pad_h;
  Walk at(threadIdx.x, blockDim.x, plan.in_cols, xv);  // (window row, window column, 8-channel group)
  for (int i = threadIdx.x; i < window * xv; i += blockDim.x, at.advance()) {
    const int h = h0 + at.row, w = at.col - g.pad_w;
    const bool inside = h >= 0 && h < g.H && w >= 0 && w < g.W;
    const S* from = inside ? x + ((int64_t(t.n) * g.H + h) * g.W + w) * g.C + at.group * 8 : x;
    copy_async_16(buffer + at.pixel() * (g.C + kPad) + at.group * 8, from, inside);
  }
  S* dys = buffer + window * (g.C + kPad);
  const int dv = g.K / 8;
  const S* dy_tile = dy + (int64_t(t.n) * g.P + t.p0) * g.Q * g.K;  // the tile's rows are consecutive
  Walk d(threadIdx.x, blockDim.x, t.padded, dv);  // (0, tile pixel, 8-channel group)
  for (int i = threadIdx.x; i < t.padded * dv; i += blockDim.x, d.advance()) {
    const bool inside = d.col < t.pixels;
    copy_async_16(dys + d.col * (g.K + kPad) + d.group * 8, inside ? dy_tile + int64_t(i) * 8 : dy, inside);
  }
  copy_async_commit();
}

// One warp's jobs (job_of) and their accumulators, kept in registers across every tile of the block.
template <class S, int JW>
struct WarpJobs {
  Job jobs[JW];
  int a_offset[JW], b_offset[JW];  // each job's place in a staged dy row and from a window pixel
  int lane, b_pixel, b_channel;
  float acc[JW][2][4] = {};

  // ldmatrix row addresses: lane / 8 picks the 8x8 matrix, lane % 8 its row (a pixel).
  __device__ WarpJobs(const Geo& g, const Plan& plan) : lane(threadIdx.x % 32) {
    const int warp = threadIdx.x / 32, mat = lane / 8, row = lane % 8;
    const int a_pixel = row + (mat >> 1) * 8, a_channel = (mat & 1) * 8;
    b_pixel = row + (mat & 1) * 8;
    b_channel = (mat >> 1) * 8;
#pragma unroll
    for (int j = 0; j < JW; ++j) {
      const int local = warp * JW + j;
      jobs[j] = job_of(blockIdx.y * plan.block_jobs + local, plan.jobs, g);
      jobs[j].valid = jobs[j].valid && local < plan.block_jobs;
      a_offset[j] = a_pixel * (g.K + kPad) + jobs[j].k0 + a_channel;
      b_offset[j] = (jobs[j].r * plan.in_cols + jobs[j].s) * (g.C + kPad) + jobs[j].c0 + b_channel;
    }
  }

  // Adds a staged tile (window xs, dy rows dys) to the accumulators, 16 pixels at a time.
  __device__ void sum_tile(const S* xs, const S* dys, const S* zero_row, const TileAt& t, const Geo& g,
                           const Plan& plan) {
    const int chunk_rows = 16 / g.Q, chunk_cols = 16 % g.Q;  // 16 pixels as output rows and columns
    int p = b_pixel / g.Q, q = b_pixel % g.Q;                  // this lane's B pixel
    for (int base = 0; base < t.padded; base += 16) {
      // A lane whose pixel is past the tile reads the zero row.
      const bool inside = base + b_pixel < t.pixels;
      const S* b_pixel_at = xs + (p * g.stride_h * plan.in_cols + q * g.stride_w) * (g.C + kPad);
      const S* a_row = dys + base * (g.K + kPad);
#pragma unroll
      for (int j = 0; j < JW; ++j) {
        if (!jobs[j].valid) continue;
        uint32_t a[4], b[4];
        ldmatrix_x4_trans(a, a_row + a_offset[j]);
        ldmatrix_x4_trans(b, inside ? b_pixel_at + b_offset[j] : zero_row + jobs[j].c0 + b_channel);
        mma_16816<S>(acc[j][0], a, b[0], b[1]);
        mma_16816<S>(acc[j][1], a, b[2], b[3]);
      }
      p += chunk_rows;
      q += chunk_cols;
      if (q >= g.Q) {
        q -= g.Q;
        ++p;
      }
    }
  }

  // Accumulator element e of n-tile t: row (output channel) lane / 4 (+ 8 for e >= 2), column (input
  // channel) t * 8 + lane % 4 * 2 (+ 1 for odd e); out[(k * R * S + tap) * C + c].
  __device__ void store(float* out, const Geo& g) const {
#pragma unroll
    for (int j = 0; j < JW; ++j) {
      if (!jobs[j].valid) continue;
      const int tap = jobs[j].r * g.S + jobs[j].s;
#pragma unroll
      for (int t = 0; t < 2; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int k = jobs[j].k0 + lane / 4 + (e >= 2 ? 8 : 0);
          const int c = jobs[j].c0 + t * 8 + lane % 4 * 2 + (e & 1);
          out[(int64_t(k) * g.R * g.S + tap) * g.C + c] = acc[j][t][e];
        }
      }
    }
  }
};

// Stage 1: block (b, slice) sums tiles [b * tiles / blocks, (b + 1) * tiles / blocks) for the slice's jobs
// into partials[b][(k * R * S + tap) * C + c].
template <class S, int JW>
__global__ void wgrad_mma_partial_kernel(const S* x, const S* dy, Geo g, Plan plan, float* partials) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  S* buffers = reinterpret_cast<S*>(shared_raw);  // [2][buffer_elems]
  S* zero_row = buffers + 2 * plan.buffer_elems;
  const int window = plan.in_rows * plan.in_cols;
  for (int i = threadIdx.x; i < g.C + kPad; i += blockDim.x) zero_row[i] = from_compute<S>(0.0f);
  WarpJobs<S, JW> warp_jobs(g, plan);
  const int64_t tiles = plan.tiles(g);
  const int64_t first = tiles * blockIdx.x / gridDim.x, last = tiles * (blockIdx.x + 1) / gridDim.x;
  stage_tile(buffers, x, dy, g, plan, tile_at(first, g, plan));
  for (int64_t tile = first; tile < last; ++tile) {
    const S* xs = buffers + (tile - first) % 2 * plan.buffer_elems;
    if (tile + 1 < last) {  // the next tile streams in while this one is summed
      stage_tile(buffers + (tile + 1 - first) % 2 * plan.buffer_elems, x, dy, g, plan, tile_at(tile + 1, g, plan));
      copy_async_wait<1>();
    } else {
      copy_async_wait<0>();
    }
    __syncthreads();
    warp_jobs.sum_tile(xs, xs + window * (g.C + kPad), zero_row, tile_at(tile, g, plan), g, plan);
    __syncthreads();  // this buffer's readers are done before the next iteration refills it
  }
  warp_jobs.store(partials + int64_t(blockIdx.x) * plan.outputs(g), g);
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
cudaError_t launch_typed(const Strided& dw, const Strided& dy, const Strided& x, const Geo& g, const Plan& plan,
                         float* partials, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(plan.blocks), static_cast<unsigned>(plan.slices));
  const int threads = plan.warps * 32;
  const size_t shared = static_cast<size_t>(plan.shared_bytes);
  auto launch = [&]<int JW>() {
    wgrad_mma_partial_kernel<S, JW><<<grid, threads, shared, stream>>>(x.ptr<S>(), dy.ptr<S>(), g, plan, partials);
  };
  switch (plan.jobs_per_warp) {
    case 1: launch.template operator()<1>(); break;
    case 2: launch.template operator()<2>(); break;
    case 4: launch.template operator()<4>(); break;
    default: launch.template operator()<kMaxJobsPerWarp>(); break;
  }
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  const int sum_blocks = static_cast<int>(ceil_div(plan.outputs(g), 32));
  wgrad_mma_sum_kernel<S><<<sum_blocks, kSumWarps * 32, 0, stream>>>(view4<S>(dw), partials, plan.blocks, g);
  return cudaGetLastError();
}

}  // namespace

bool conv_wgrad_mma_fits(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p) {
  return make_plan(geo_of(dw, dy, x, p)).rows > 0;
}

int64_t conv_wgrad_mma_partials(const Strided& dw, const Strided& dy, const Strided& x,
                                const kernel::ConvParams& p) {
  const Geo g = geo_of(dw, dy, x, p);
  const Plan plan = make_plan(g);
  return plan.rows > 0 ? plan.blocks * plan.outputs(g) : 0;
}

cudaError_t launch_conv_wgrad_mma(const Strided& dw, const Strided& dy, const Strided& x,
                                  const kernel::ConvParams& p, float* partials, cudaStream_t stream) {
  if (dw.numel() == 0) return cudaSuccess;
  if (dy.numel() == 0) return launch_fill(dw, 0.0, stream);
  const Geo g = geo_of(dw, dy, x, p);
  const Plan plan = make_plan(g);
  if (x.dtype == DType::BFloat16) return launch_typed<__nv_bfloat16>(dw, dy, x, g, plan, partials, stream);
  return launch_typed<__half>(dw, dy, x, g, plan, partials, stream);
}

}  // namespace loom::cuda
