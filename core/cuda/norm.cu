// File: core/cuda/norm.cu
// Batch-norm kernels. N batch, C channels, M elements of one channel (all dims
// but dim 1). The forward and the eval dx are one per-channel affine map over
// all elements; the batch statistics, the weight and bias gradients and the
// training dx are a block per channel. (The training kernels are the tier below
// cuDNN's NORM graphs: they run what no cuDNN engine takes.)
// x, y, dx, dy have storage type S; the per-channel vectors, and all the math,
// are compute_t<S>: float32 for bfloat16 and float16 activations (element.cuh).
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

}  // namespace loom::cuda
