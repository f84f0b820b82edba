// File: core/cuda/layer_norm.cu
// Layer-norm kernels; see layer_norm.h. N rows of D values. The forward and dx
// give each row a warp (kRowsPerBlock rows a block): a row's sums are each
// lane's serial share, then a butterfly over the warp. dweight and dbias are
// column sums: block (x, g) sums columns x * 32 + tx over rows g * 8 + ty,
// stepping groups * 8, adds its 8 row-partials as a tree and stores them by
// group; a last pass adds the groups in order. Storage type S; math and the
// statistics in compute_t<S> (element.cuh).
#include <algorithm>

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/layer_norm_kernels.h"

namespace loom::cuda {

namespace {

constexpr int kRowsPerBlock = kThreads / kWarp;
constexpr int kTileRows = 8;        // threads down a column-sum block
constexpr int64_t kMaxGroups = 128;  // row groups of the column sums
constexpr int64_t kMinRowsPerThread = 16;

template <class S>
__device__ compute_t<S> value_or(const S* v, int64_t j, compute_t<S> absent) {
  return v ? to_compute(v[j]) : absent;
}

// What the backward kernels read of the forward: x and its row statistics.
template <class S>
struct Rows {
  using T = compute_t<S>;
  const S* x;
  const T* mean;
  const T* invstd;
  const S* weight;  // null: 1
  int64_t n, d;
};

__device__ inline int64_t first_row() { return blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / kWarp; }
__device__ inline int64_t row_step() { return int64_t(gridDim.x) * kRowsPerBlock; }

template <class S>
__global__ void forward_kernel(S* y, compute_t<S>* mean, compute_t<S>* invstd, const S* x, const S* weight,
                               const S* bias, int64_t n, int64_t d, double eps) {
  using T = compute_t<S>;
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = first_row(); r < n; r += row_step()) {
    const S* in = x + r * d;
    T sum = 0;
    for (int64_t j = lane; j < d; j += kWarp) sum += to_compute(in[j]);
    const T mu = warp_sum(sum) / static_cast<T>(d);
    T squares = 0;
    for (int64_t j = lane; j < d; j += kWarp) {
      const T centered = to_compute(in[j]) - mu;
      squares += centered * centered;
    }
    const T rstd = T(1) / sqrt(warp_sum(squares) / static_cast<T>(d) + static_cast<T>(eps));
    S* out = y + r * d;
    for (int64_t j = lane; j < d; j += kWarp) {
      out[j] = from_compute<S>((to_compute(in[j]) - mu) * rstd * value_or(weight, j, T(1)) + value_or(bias, j, T(0)));
    }
    if (lane == 0) {
      mean[r] = mu;
      invstd[r] = rstd;
    }
  }
}

template <class S>
__global__ void dx_kernel(S* dx, const S* dy, Rows<S> a) {
  using T = compute_t<S>;
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = first_row(); r < a.n; r += row_step()) {
    const S *in = a.x + r * a.d, *grad = dy + r * a.d;
    const T m = a.mean[r], s = a.invstd[r];
    T sum_g = 0, sum_g_xhat = 0;
    for (int64_t j = lane; j < a.d; j += kWarp) {
      const T g = to_compute(grad[j]) * value_or(a.weight, j, T(1));
      sum_g += g;
      sum_g_xhat += g * (to_compute(in[j]) - m) * s;
    }
    const T mean_g = warp_sum(sum_g) / static_cast<T>(a.d);
    const T mean_g_xhat = warp_sum(sum_g_xhat) / static_cast<T>(a.d);
    S* out = dx + r * a.d;
    for (int64_t j = lane; j < a.d; j += kWarp) {
      const T g = to_compute(grad[j]) * value_or(a.weight, j, T(1));
      out[j] = from_compute<S>(s * (g - mean_g - (to_compute(in[j]) - m) * s * mean_g_xhat));
    }
  }
}

// Where group g's column sums go: partial[g][c] (dweight's, then dbias's block
// of groups * D), or straight into dweight and dbias when there is one group.
template <class S>
struct ColumnOut {
  compute_t<S>* partial;  // null: one group
  S* dweight;             // null when not asked
  S* dbias;
  int64_t groups;
};

template <class S>
__global__ void column_sums_kernel(const S* dy, Rows<S> a, ColumnOut<S> out) {
  using T = compute_t<S>;
  __shared__ T tile_w[kTileRows][kWarp + 1];
  __shared__ T tile_b[kTileRows][kWarp + 1];
  const int64_t c = blockIdx.x * int64_t(kWarp) + threadIdx.x;
  T sum_w = 0, sum_b = 0;
  if (c < a.d) {
    for (int64_t r = blockIdx.y * int64_t(kTileRows) + threadIdx.y; r < a.n; r += out.groups * kTileRows) {
      const T g = to_compute(dy[r * a.d + c]);
      sum_b += g;
      sum_w += g * (to_compute(a.x[r * a.d + c]) - a.mean[r]) * a.invstd[r];
    }
  }
  tile_w[threadIdx.y][threadIdx.x] = sum_w;
  tile_b[threadIdx.y][threadIdx.x] = sum_b;
  __syncthreads();
  for (int half = kTileRows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      tile_w[threadIdx.y][threadIdx.x] += tile_w[threadIdx.y + half][threadIdx.x];
      tile_b[threadIdx.y][threadIdx.x] += tile_b[threadIdx.y + half][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y != 0 || c >= a.d) return;
  if (out.partial == nullptr) {
    if (out.dweight) out.dweight[c] = from_compute<S>(tile_w[0][threadIdx.x]);
    if (out.dbias) out.dbias[c] = from_compute<S>(tile_b[0][threadIdx.x]);
    return;
  }
  out.partial[blockIdx.y * a.d + c] = tile_w[0][threadIdx.x];
  out.partial[(out.groups + blockIdx.y) * a.d + c] = tile_b[0][threadIdx.x];
}

template <class S>
__global__ void finish_columns_kernel(ColumnOut<S> out, int64_t d) {
  using T = compute_t<S>;
  for (int64_t c = first_index(); c < d; c += index_step()) {
    T sum_w = 0, sum_b = 0;
    for (int64_t g = 0; g < out.groups; ++g) {
      sum_w += out.partial[g * d + c];
      sum_b += out.partial[(out.groups + g) * d + c];
    }
    if (out.dweight) out.dweight[c] = from_compute<S>(sum_w);
    if (out.dbias) out.dbias[c] = from_compute<S>(sum_b);
  }
}

int64_t column_groups(int64_t n) {
  return std::clamp((n + kTileRows * kMinRowsPerThread - 1) / (kTileRows * kMinRowsPerThread), int64_t{1},
                    kMaxGroups);
}

int row_blocks(int64_t n) { return blocks_for_groups((n + kRowsPerBlock - 1) / kRowsPerBlock); }

template <class S>
const S* ptr_or_null(const Strided* v) {
  return v ? v->ptr<const S>() : nullptr;
}

template <class S>
S* mutable_or_null(const Strided* v) {
  return v ? v->ptr<S>() : nullptr;
}

template <class S>
void launch_backward(const Strided& dx, const Strided* dweight, const Strided* dbias, const Strided& dy,
                     const Strided& x, const Strided& mean, const Strided& invstd, const Strided* weight,
                     void* scratch, cudaStream_t stream) {
  using T = compute_t<S>;
  const int64_t n = x.sizes[0], d = x.sizes[1];
  const Rows<S> rows{x.ptr<const S>(), mean.ptr<const T>(), invstd.ptr<const T>(), ptr_or_null<S>(weight), n, d};
  if (n > 0) dx_kernel<S><<<row_blocks(n), kThreads, 0, stream>>>(dx.ptr<S>(), dy.ptr<const S>(), rows);
  if (dweight == nullptr && dbias == nullptr) return;
  const int64_t groups = column_groups(n);
  const ColumnOut<S> out{groups > 1 ? static_cast<T*>(scratch) : nullptr, mutable_or_null<S>(dweight),
                         mutable_or_null<S>(dbias), groups};
  const dim3 grid(static_cast<unsigned>((d + kWarp - 1) / kWarp), static_cast<unsigned>(groups));
  column_sums_kernel<S><<<grid, dim3(kWarp, kTileRows), 0, stream>>>(dy.ptr<const S>(), rows, out);
  if (groups > 1) finish_columns_kernel<S><<<blocks_for(d), kThreads, 0, stream>>>(out, d);
}

}  // namespace

cudaError_t launch_layer_norm_forward(const Strided& y, const Strided& mean, const Strided& invstd,
                                      const Strided& x, const Strided* weight, const Strided* bias, double eps,
                                      cudaStream_t stream) {
  const int64_t n = x.sizes[0], d = x.sizes[1];
  if (n == 0) return cudaSuccess;  // an empty row (d = 0) gets mean NaN, as on the CPU
  visit_floating(x.dtype, [&]<class S>() {
    using T = compute_t<S>;
    forward_kernel<S><<<row_blocks(n), kThreads, 0, stream>>>(y.ptr<S>(), mean.ptr<T>(), invstd.ptr<T>(),
                                                              x.ptr<const S>(), ptr_or_null<S>(weight),
                                                              ptr_or_null<S>(bias), n, d, eps);
  });
  return cudaGetLastError();
}

size_t layer_norm_backward_scratch_bytes(const Strided& x) {
  const int64_t groups = column_groups(x.sizes[0]);
  if (groups == 1) return 0;
  const size_t value_bytes = x.dtype == DType::Float64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(2 * groups * x.sizes[1]) * value_bytes;
}

cudaError_t launch_layer_norm_backward(const Strided& dx, const Strided* dweight, const Strided* dbias,
                                       const Strided& dy, const Strided& x, const Strided& mean,
                                       const Strided& invstd, const Strided* weight, void* scratch,
                                       cudaStream_t stream) {
  if (x.sizes[1] == 0) return cudaSuccess;  // no rows still write dweight = dbias = 0
  visit_floating(x.dtype, [&]<class S>() {
    launch_backward<S>(dx, dweight, dbias, dy, x, mean, invstd, weight, scratch, stream);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
