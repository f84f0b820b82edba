// File: core/cuda/norm.cu
// Batch-norm kernels. N batch, C channels, M elements of one channel (all dims
// but dim 1). The forward and the eval dx are one per-channel affine map over
// all elements; the batch statistics, the weight and bias gradients and the
// training dx are a block per channel. (The training kernels are the tier below
// cuDNN's NORM graphs: they run what no cuDNN engine takes.)
// x, y, dx, dy have storage type S; the per-channel vectors, and all the math,
// are compute_t<S>: float32 for bfloat16 and float16 activations (element.cuh).
#include <algorithm>
#include <cmath>

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/norm_kernels.h"

namespace loom::cuda {

namespace {

// A per-channel vector (C) with any stride; `data` is null when it is absent.
template <class T>
struct ChannelVector {
  T* data;
  int64_t stride;

  __device__ T& operator[](int64_t c) const { return data[c * stride]; }
  __device__ T get_or(int64_t c, T absent) const { return data ? data[c * stride] : absent; }
};

template <class T>
ChannelVector<T> channel_vector(const Strided* v) {
  if (v == nullptr) return {nullptr, 0};
  return {v->ptr<T>(), v->strides[0]};
}

// ---- running stats --------------------------------------------------------------

template <class T>
__global__ void running_stats_kernel(ChannelVector<T> save_mean, ChannelVector<T> save_invstd,
                                     ChannelVector<const T> running_mean,
                                     ChannelVector<const T> running_var, double eps,
                                     int64_t channels) {
  for (int64_t c = first_index(); c < channels; c += index_step()) {
    save_mean[c] = running_mean[c];
    save_invstd[c] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps));
  }
}

// ---- per-channel affine map: forward and eval dx ----------------------------------

// out = in * scale + shift per channel, with the CPU's folding:
// scale = invstd * weight, shift = bias - mean * scale. Without a mean there is
// no centering (the eval dx): shift = bias.
template <class S>
struct ChannelAffine {
  using T = compute_t<S>;
  S* out;
  Geometry out_geometry;
  const S* in;
  Geometry in_geometry;
  ChannelVector<const T> mean, invstd, weight, bias;  // all but invstd may be absent
  int64_t n, inner, channels;  // inner: elements per (sample, channel)
};

template <class S>
__global__ void channel_affine_kernel(ChannelAffine<S> a) {
  using T = compute_t<S>;
  for (int64_t i = first_index(); i < a.n; i += index_step()) {
    const int64_t c = (i / a.inner) % a.channels;  // i is row-major over (N, C, inner)
    const T scale = a.invstd[c] * a.weight.get_or(c, T(1));
    const T bias = a.bias.get_or(c, T(0));
    const T shift = a.mean.data ? bias - a.mean[c] * scale : bias;
    a.out[offset_of(i, a.out_geometry)] =
        from_compute<S>(to_compute(a.in[offset_of(i, a.in_geometry)]) * scale + shift);
  }
}

template <class S>
void launch_channel_affine(const Strided& out, const Strided& in, const Strided* mean,
                           const Strided& invstd, const Strided* weight, const Strided* bias,
                           cudaStream_t stream) {
  using T = compute_t<S>;
  const int64_t n = in.numel();
  if (n == 0) return;
  const int64_t channels = in.sizes[1];
  const ChannelAffine<S> a{out.ptr<S>(),
                           geometry_of(out),
                           in.ptr<const S>(),
                           geometry_of(in),
                           channel_vector<const T>(mean),
                           channel_vector<const T>(&invstd),
                           channel_vector<const T>(weight),
                           channel_vector<const T>(bias),
                           n,
                           n / (in.sizes[0] * channels),
                           channels};
  channel_affine_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a);
}

// ---- weight and bias gradients: a block per channel ----------------------------------

template <class T>
struct GradSums {
  T dy, dy_xhat;
};

// Channel c of a (N, C, ...) tensor is base + c * channel_stride over `rest`, the
// geometry of the (N, ...) dims without dim 1.
template <class T>
struct ChannelViews {
  const T* base;
  int64_t channel_stride;
  Geometry rest;
};

template <class T>
ChannelViews<T> channel_views(const Strided& t) {
  Shape sizes = t.sizes, strides = t.strides;
  sizes.erase(sizes.begin() + 1);
  strides.erase(strides.begin() + 1);
  return {t.ptr<const T>(), t.strides[1], geometry_of(sizes, strides)};
}

template <class S, class T = compute_t<S>>
__global__ void grad_sums_kernel(ChannelVector<T> dweight, ChannelVector<T> dbias,
                                 ChannelViews<S> dy, ChannelViews<S> x, ChannelVector<const T> mean,
                                 ChannelVector<const T> invstd, int64_t channels, int64_t m) {
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {  // uniform per block
    const S* dyc = dy.base + c * dy.channel_stride;
    const S* xc = x.base + c * x.channel_stride;
    const T mean_c = mean[c], invstd_c = invstd[c];
    GradSums<T> sums{T(0), T(0)};
    for (int64_t j = threadIdx.x; j < m; j += kThreads) {
      const T g = to_compute(dyc[offset_of(j, dy.rest)]);
      sums.dy += g;
      sums.dy_xhat += g * (to_compute(xc[offset_of(j, x.rest)]) - mean_c) * invstd_c;
    }
    sums = block_reduce(sums, [](const GradSums<T>& a, const GradSums<T>& b) {
      return GradSums<T>{a.dy + b.dy, a.dy_xhat + b.dy_xhat};
    });
    if (threadIdx.x == 0) {
      if (dbias.data) dbias[c] = sums.dy;
      if (dweight.data) dweight[c] = sums.dy_xhat;
    }
  }
}

// ---- training: batch statistics and the backward, a block per channel --------------

// Sums in double: two passes over M values, then an exact-enough 1 / sqrt.
struct MomentSums {
  double first, second;
};

template <class S, class T = compute_t<S>>
__global__ void batch_stats_kernel(ChannelVector<T> save_mean, ChannelVector<T> save_invstd,
                                   ChannelVector<T> running_mean, ChannelVector<T> running_var,
                                   ChannelViews<S> x, double eps, double momentum,
                                   int64_t channels, int64_t m) {
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {  // uniform per block
    const S* xc = x.base + c * x.channel_stride;
    double sum = 0;
    for (int64_t j = threadIdx.x; j < m; j += kThreads) sum += to_compute(xc[offset_of(j, x.rest)]);
    const double mean = block_reduce(sum, [](double a, double b) { return a + b; }) / m;
    // The mean first, so the variance does not cancel catastrophically for
    // inputs with a large mean and a small spread.
    double squares = 0;
    for (int64_t j = threadIdx.x; j < m; j += kThreads) {
      const double d = to_compute(xc[offset_of(j, x.rest)]) - mean;
      squares += d * d;
    }
    const double var = block_reduce(squares, [](double a, double b) { return a + b; }) / m;
    if (threadIdx.x != 0) continue;
    save_mean[c] = static_cast<T>(mean);
    save_invstd[c] = static_cast<T>(1.0 / sqrt(var + eps));
    if (running_mean.data) {
      const double unbiased = var * m / (m - 1);
      running_mean[c] = static_cast<T>((1 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] = static_cast<T>((1 - momentum) * running_var[c] + momentum * unbiased);
    }
  }
}

// dbias = sum dy, dweight = sum dy * xhat, and
// dx = weight * invstd * (dy - (dbias + xhat * dweight) / M), as the CPU kernel.
template <class S, class T = compute_t<S>>
struct TrainingBackward {
  S* dx;
  Geometry dx_rest;
  int64_t dx_channel_stride;
  ChannelVector<T> dweight, dbias;
  ChannelViews<S> dy, x;
  ChannelVector<const T> mean, invstd, weight;
  int64_t channels, m;
};

template <class S, class T = compute_t<S>>
__global__ void training_backward_kernel(TrainingBackward<S> a) {
  for (int64_t c = blockIdx.x; c < a.channels; c += gridDim.x) {  // uniform per block
    const S* dyc = a.dy.base + c * a.dy.channel_stride;
    const S* xc = a.x.base + c * a.x.channel_stride;
    const double mean_c = a.mean[c], invstd_c = a.invstd[c];
    MomentSums sums{0, 0};
    for (int64_t j = threadIdx.x; j < a.m; j += kThreads) {
      const double g = to_compute(dyc[offset_of(j, a.dy.rest)]);
      sums.first += g;
      sums.second += g * (to_compute(xc[offset_of(j, a.x.rest)]) - mean_c) * invstd_c;
    }
    sums = block_reduce(sums, [](const MomentSums& p, const MomentSums& q) {
      return MomentSums{p.first + q.first, p.second + q.second};
    });
    if (threadIdx.x == 0) {
      if (a.dbias.data) a.dbias[c] = static_cast<T>(sums.first);
      if (a.dweight.data) a.dweight[c] = static_cast<T>(sums.second);
    }
    if (!a.dx) continue;
    const double scale = invstd_c * static_cast<double>(a.weight.get_or(c, T(1)));
    S* dxc = a.dx + c * a.dx_channel_stride;
    for (int64_t j = threadIdx.x; j < a.m; j += kThreads) {
      const double xhat = (to_compute(xc[offset_of(j, a.x.rest)]) - mean_c) * invstd_c;
      const double g = to_compute(dyc[offset_of(j, a.dy.rest)]) - (sums.first + xhat * sums.second) / a.m;
      dxc[offset_of(j, a.dx_rest)] = from_compute<S>(static_cast<T>(scale * g));
    }
  }
}

// ---- training backward over rows of channels ---------------------------------------
// x, dy, dx, y, dresidual dense rows of C channels (channels-last, or (N, C)):
// element i is channel i % C of row i / C. Three kernels: per-block sums of
// dpre and dpre * (x - mean) over a block's rows, a block per channel adding
// the block sums in order (so the result does not depend on timing) and
// writing dweight, dbias and dx's coefficients, then dx (and dresidual) one
// element per thread. dpre = dy where y > 0 after a ReLU, else dy.
template <class S, class T = compute_t<S>>
struct RowsBackward {
  S* dx;         // null when not wanted
  S* dresidual;  // dpre, for the residual added before the ReLU; null when not wanted
  const S* dy;
  const S* x;
  const S* y;  // the ReLU's output; null without a ReLU
  ChannelVector<const T> mean, invstd, weight;
  ChannelVector<T> dweight, dbias;
  double* partials;  // blocks x 2C block sums, then 3C coefficients of dx
  int64_t rows, channels;
  int blocks;
};

template <class S, class T = compute_t<S>>
__device__ T gated_grad(const RowsBackward<S>& a, int64_t i) {
  const T g = to_compute(a.dy[i]);
  return a.y == nullptr || to_compute(a.y[i]) > T(0) ? g : T(0);
}

template <class S>
__global__ void rows_partials_kernel(RowsBackward<S> a) {
  __shared__ double sums[2][kThreads];
  const int64_t lanes = kThreads / a.channels;  // rows a block reads at once
  const int64_t c = threadIdx.x % a.channels, lane = threadIdx.x / a.channels;
  double first = 0, second = 0;
  if (lane < lanes) {
    const double mean_c = a.mean[c];
    const int64_t step = int64_t{a.blocks} * lanes;
    int64_t r = blockIdx.x * lanes + lane;
    // Four rows an iteration: their loads are in flight together (with few
    // lanes a block, C large, a thread walks many rows).
    for (; r + 3 * step < a.rows; r += 4 * step) {
      double g[4], xv[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t i = (r + k * step) * a.channels + c;
        g[k] = gated_grad(a, i);
        xv[k] = to_compute(a.x[i]);
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        first += g[k];
        second += g[k] * (xv[k] - mean_c);
      }
    }
    for (; r < a.rows; r += step) {
      const int64_t i = r * a.channels + c;
      const double g = gated_grad(a, i);
      first += g;
      second += g * (static_cast<double>(to_compute(a.x[i])) - mean_c);
    }
  }
  sums[0][threadIdx.x] = first;
  sums[1][threadIdx.x] = second;
  __syncthreads();
  if (threadIdx.x >= a.channels) return;
  for (int64_t l = 1; l < lanes; ++l) {
    first += sums[0][l * a.channels + c];
    second += sums[1][l * a.channels + c];
  }
  a.partials[blockIdx.x * 2 * a.channels + c] = first;
  a.partials[blockIdx.x * 2 * a.channels + a.channels + c] = second;
}

template <class S, class T = compute_t<S>>
__global__ void rows_finalize_kernel(RowsBackward<S> a) {
  const int64_t channels = a.channels;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {  // uniform per block
    MomentSums s{0, 0};
    for (int b = threadIdx.x; b < a.blocks; b += kThreads) {
      s.first += a.partials[b * 2 * channels + c];
      s.second += a.partials[b * 2 * channels + channels + c];
    }
    s = block_reduce(s, [](const MomentSums& p, const MomentSums& q) {
      return MomentSums{p.first + q.first, p.second + q.second};
    });
    if (threadIdx.x != 0) continue;
    const double invstd = a.invstd[c], m = static_cast<double>(a.rows);
    const double dweight = s.second * invstd;  // sum dpre * xhat
    if (a.dbias.data) a.dbias[c] = static_cast<T>(s.first);
    if (a.dweight.data) a.dweight[c] = static_cast<T>(dweight);
    const double scale = invstd * static_cast<double>(a.weight.get_or(c, T(1)));
    double* coef = a.partials + int64_t{a.blocks} * 2 * channels;
    coef[c] = scale;                                          // times dpre
    coef[channels + c] = scale * invstd * dweight / m;        // times x - mean
    coef[2 * channels + c] = scale * s.first / m;             // subtracted
  }
}

template <class S, class T = compute_t<S>>
__global__ void rows_dx_kernel(RowsBackward<S> a) {
  const int64_t channels = a.channels, n = a.rows * channels;
  const double* coef = a.partials + int64_t{a.blocks} * 2 * channels;
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const int64_t c = i % channels;
    const T g = gated_grad(a, i);
    if (a.dresidual) a.dresidual[i] = from_compute<S>(g);
    if (!a.dx) continue;
    const T centered = to_compute(a.x[i]) - a.mean[c];
    a.dx[i] = from_compute<S>(static_cast<T>(coef[c]) * g - static_cast<T>(coef[channels + c]) * centered -
                              static_cast<T>(coef[2 * channels + c]));
  }
}

// Blocks of rows_partials_kernel: enough to fill the GPU, few enough that the
// finalize adds few partial sums.
int rows_blocks(int64_t rows, int64_t channels) {
  const int64_t lanes = kThreads / channels;
  return static_cast<int>(std::clamp<int64_t>((rows + lanes * 8 - 1) / (lanes * 8), 1, 1024));
}

}  // namespace

cudaError_t launch_batch_norm_batch_stats(const Strided& save_mean, const Strided& save_invstd,
                                          const Strided& x, double eps,
                                          const Strided* running_mean, const Strided* running_var,
                                          double momentum, cudaStream_t stream) {
  const int64_t channels = x.sizes[1];
  if (channels == 0 || x.numel() == 0) return cudaSuccess;
  visit_floating(x.dtype, [&]<class S>() {
    using T = compute_t<S>;
    batch_stats_kernel<S><<<blocks_for_groups(channels), kThreads, 0, stream>>>(
        channel_vector<T>(&save_mean), channel_vector<T>(&save_invstd),
        channel_vector<T>(running_mean), channel_vector<T>(running_var), channel_views<S>(x), eps,
        momentum, channels, x.numel() / channels);
  });
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_backward_training(const Strided* dx, const Strided* dweight,
                                                const Strided* dbias, const Strided& dy,
                                                const Strided& x, const Strided& mean,
                                                const Strided& invstd, const Strided* weight,
                                                cudaStream_t stream) {
  const int64_t channels = x.sizes[1];
  if (channels == 0 || x.numel() == 0) return cudaSuccess;
  visit_floating(x.dtype, [&]<class S>() {
    using T = compute_t<S>;
    TrainingBackward<S> a{};
    if (dx != nullptr) {
      ChannelViews<S> view = channel_views<S>(*dx);
      a.dx = dx->ptr<S>();
      a.dx_rest = view.rest;
      a.dx_channel_stride = view.channel_stride;
    }
    a.dweight = channel_vector<T>(dweight);
    a.dbias = channel_vector<T>(dbias);
    a.dy = channel_views<S>(dy);
    a.x = channel_views<S>(x);
    a.mean = channel_vector<const T>(&mean);
    a.invstd = channel_vector<const T>(&invstd);
    a.weight = channel_vector<const T>(weight);
    a.channels = channels;
    a.m = x.numel() / channels;
    training_backward_kernel<S><<<blocks_for_groups(channels), kThreads, 0, stream>>>(a);
  });
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_running_stats(const Strided& save_mean, const Strided& save_invstd,
                                            const Strided& running_mean,
                                            const Strided& running_var, double eps,
                                            cudaStream_t stream) {
  const int64_t channels = save_mean.sizes[0];
  if (channels == 0) return cudaSuccess;
  visit_float(save_mean.dtype, [&]<class T>() {
    running_stats_kernel<<<blocks_for(channels), kThreads, 0, stream>>>(
        channel_vector<T>(&save_mean), channel_vector<T>(&save_invstd),
        channel_vector<const T>(&running_mean), channel_vector<const T>(&running_var), eps,
        channels);
  });
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_forward(const Strided& y, const Strided& x, const Strided& mean,
                                      const Strided& invstd, const Strided* weight,
                                      const Strided* bias, cudaStream_t stream) {
  visit_floating(x.dtype, [&]<class S>() {
    launch_channel_affine<S>(y, x, &mean, invstd, weight, bias, stream);
  });
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_backward_eval(const Strided* dx, const Strided* dweight,
                                            const Strided* dbias, const Strided& dy,
                                            const Strided& x, const Strided& mean,
                                            const Strided& invstd, const Strided* weight,
                                            cudaStream_t stream) {
  const int64_t channels = x.sizes[1];
  visit_floating(x.dtype, [&]<class S>() {
    using T = compute_t<S>;
    if (dx != nullptr) launch_channel_affine<S>(*dx, dy, nullptr, invstd, weight, nullptr, stream);
    if ((dweight != nullptr || dbias != nullptr) && channels > 0) {
      grad_sums_kernel<S><<<blocks_for_groups(channels), kThreads, 0, stream>>>(
          channel_vector<T>(dweight), channel_vector<T>(dbias), channel_views<S>(dy),
          channel_views<S>(x), channel_vector<const T>(&mean), channel_vector<const T>(&invstd),
          channels, x.numel() / channels);
    }
  });
  return cudaGetLastError();
}

size_t batch_norm_rows_scratch_bytes(int64_t rows, int64_t channels) {
  return static_cast<size_t>(rows_blocks(rows, channels) * 2 + 3) * channels * sizeof(double);
}

cudaError_t launch_batch_norm_backward_rows(const Strided* dx, const Strided* dresidual,
                                            const Strided& dy, const Strided& x, const Strided* y,
                                            const Strided& mean, const Strided& invstd,
                                            const Strided* weight, const Strided* dweight,
                                            const Strided* dbias, void* scratch, cudaStream_t stream) {
  const int64_t channels = x.sizes[1];
  if (channels == 0 || x.numel() == 0) return cudaSuccess;
  visit_floating(x.dtype, [&]<class S>() {
    using T = compute_t<S>;
    RowsBackward<S> a{};
    a.dx = dx ? dx->ptr<S>() : nullptr;
    a.dresidual = dresidual ? dresidual->ptr<S>() : nullptr;
    a.dy = dy.ptr<const S>();
    a.x = x.ptr<const S>();
    a.y = y ? y->ptr<const S>() : nullptr;
    a.mean = channel_vector<const T>(&mean);
    a.invstd = channel_vector<const T>(&invstd);
    a.weight = channel_vector<const T>(weight);
    a.dweight = channel_vector<T>(dweight);
    a.dbias = channel_vector<T>(dbias);
    a.partials = static_cast<double*>(scratch);
    a.channels = channels;
    a.rows = x.numel() / channels;
    a.blocks = rows_blocks(a.rows, channels);
    rows_partials_kernel<S><<<a.blocks, kThreads, 0, stream>>>(a);
    rows_finalize_kernel<S><<<blocks_for_groups(channels), kThreads, 0, stream>>>(a);
    if (a.dx || a.dresidual) rows_dx_kernel<S><<<blocks_for(x.numel()), kThreads, 0, stream>>>(a);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
