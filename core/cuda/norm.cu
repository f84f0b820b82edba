// File: core/cuda/norm.cu
// Batch-norm kernels. N batch, C channels, M elements of one channel (all dims
// but dim 1). The forward and the eval dx are one per-channel affine map over
// all elements; the batch statistics and the weight and bias gradients are
// per-channel sums split over many blocks, and the training dx is elementwise.
// (The training kernels are the tier below cuDNN's NORM graphs: they run what no
// cuDNN engine takes.)
// x, y, dx, dy have storage type S; the per-channel vectors, and all the math,
// are compute_t<S>: float32 for bfloat16 and float16 activations (element.cuh).
#include <algorithm>
#include <cmath>

#include "core/cuda/channel_sums.cuh"
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

// ---- per-channel sums (channel_sums.cuh), of two moments in double -----------------

struct MomentSums {
  double first, second;
};

struct AddMoments {
  __device__ MomentSums operator()(const MomentSums& p, const MomentSums& q) const {
    return {p.first + q.first, p.second + q.second};
  }
};

template <class Term, class Finish>
void sum_moments(const ChannelSplit& split, const Term& term, const Finish& finish, MomentSums* partial,
                 cudaStream_t stream) {
  sum_channels(split, term, AddMoments{}, finish, partial, stream);
}

// ---- batch statistics: the mean first, then the squared deviations from it ------------
// (two passes in double, so the variance does not cancel catastrophically for
// inputs with a large mean and a small spread)

template <class S>
struct ValueTerm {
  ChannelViews<const S> x;
  __device__ MomentSums operator()(int64_t c, int64_t j) const { return {static_cast<double>(x.at(c, j)), 0}; }
};

template <class S>
struct SquaredDeviationTerm {
  ChannelViews<const S> x;
  const double* mean;
  __device__ MomentSums operator()(int64_t c, int64_t j) const {
    const double d = static_cast<double>(x.at(c, j)) - mean[c];
    return {d * d, 0};
  }
};

struct MeanFinish {
  double* mean;
  int64_t m;
  __device__ void operator()(int64_t c, const MomentSums& s) const { mean[c] = s.first / m; }
};

template <class T>
struct StatsFinish {
  ChannelVector<T> save_mean, save_invstd, running_mean, running_var;
  const double* mean;
  double eps, momentum;
  int64_t m;

  __device__ void operator()(int64_t c, const MomentSums& s) const {
    const double var = s.first / m;
    save_mean[c] = static_cast<T>(mean[c]);
    save_invstd[c] = static_cast<T>(1.0 / sqrt(var + eps));
    if (running_mean.data) {
      const double unbiased = var * m / (m - 1);
      running_mean[c] = static_cast<T>((1 - momentum) * running_mean[c] + momentum * mean[c]);
      running_var[c] = static_cast<T>((1 - momentum) * running_var[c] + momentum * unbiased);
    }
  }
};

// ---- gradients: dbias = sum dy, dweight = sum dy * xhat, and the training dx -----------

template <class S, class T = compute_t<S>>
struct GradTerm {
  ChannelViews<const S> dy, x;
  ChannelVector<const T> mean, invstd;
  __device__ MomentSums operator()(int64_t c, int64_t j) const {
    const double g = dy.at(c, j), xhat = (double(x.at(c, j)) - double(mean[c])) * double(invstd[c]);
    return {g, g * xhat};
  }
};

// Writes the gradients asked for and keeps the sums for the training dx (totals
// null: not kept).
template <class T>
struct GradFinish {
  ChannelVector<T> dweight, dbias;
  MomentSums* totals;
  __device__ void operator()(int64_t c, const MomentSums& s) const {
    if (dbias.data) dbias[c] = static_cast<T>(s.first);
    if (dweight.data) dweight[c] = static_cast<T>(s.second);
    if (totals) totals[c] = s;
  }
};

// dx = weight * invstd * (dy - (dbias + xhat * dweight) / M), as the CPU kernel,
// one element per thread. When the channel is every operand's innermost dim
// (channels-last), consecutive threads take consecutive channels, otherwise
// consecutive elements of one channel: either way they touch adjacent memory.
template <class S, class T = compute_t<S>>
struct TrainingDx {
  ChannelViews<S> dx;
  ChannelViews<const S> dy, x;
  ChannelVector<const T> mean, invstd, weight;
  const MomentSums* totals;
  int64_t channels, m;
  bool channel_fastest;
  kernel::math::Divider inner;  // channels or m (the faster index), for narrow index ranges
  bool narrow;
};

template <class S, class T = compute_t<S>>
__global__ void training_dx_kernel(TrainingDx<S> a) {
  const int64_t n = a.channels * a.m, fast = a.channel_fastest ? a.channels : a.m;
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const int64_t slow = a.narrow ? kernel::math::divide(static_cast<uint32_t>(i), a.inner) : i / fast;
    const int64_t c = a.channel_fastest ? i - slow * fast : slow;
    const int64_t j = a.channel_fastest ? slow : i - slow * fast;
    const double mean_c = a.mean[c], invstd_c = a.invstd[c];
    const double xhat = (double(a.x.at(c, j)) - mean_c) * invstd_c;
    const MomentSums s = a.totals[c];
    const double g = double(a.dy.at(c, j)) - (s.first + xhat * s.second) / a.m;
    const double scale = invstd_c * static_cast<double>(a.weight.get_or(c, T(1)));
    a.dx.ref(c, j) = from_compute<S>(static_cast<T>(scale * g));
  }
}

template <class S>
void launch_training_dx(const Strided& dx, const Strided& dy, const Strided& x, const Strided& mean,
                        const Strided& invstd, const Strided* weight, const MomentSums* totals,
                        cudaStream_t stream) {
  using T = compute_t<S>;
  TrainingDx<S> a{channel_views<S>(dx),          channel_views<const S>(dy),
                  channel_views<const S>(x),       channel_vector<const T>(&mean),
                  channel_vector<const T>(&invstd), channel_vector<const T>(weight),
                  totals,                          x.sizes[1],
                  x.numel() / x.sizes[1]};
  a.channel_fastest = dx.strides[1] == 1 && dy.strides[1] == 1 && x.strides[1] == 1;
  const int64_t n = a.channels * a.m;
  a.narrow = n < kernel::math::kNarrowIndexLimit;
  if (a.narrow) a.inner = kernel::math::divider_for(a.channel_fastest ? a.channels : a.m);
  training_dx_kernel<S><<<blocks_for(n), kThreads, 0, stream>>>(a);
}

}  // namespace

// The scratch holds the partials of x's split, then one more sum per channel
// (the mean, or the training dx's totals).
size_t batch_norm_scratch_bytes(const Strided& x) {
  const ChannelSplit split = channel_split(x);
  return static_cast<size_t>(split.partials() + split.channels) * sizeof(MomentSums);
}

cudaError_t launch_batch_norm_batch_stats(const Strided& save_mean, const Strided& save_invstd,
                                          const Strided& x, double eps,
                                          const Strided* running_mean, const Strided* running_var,
                                          double momentum, void* scratch, cudaStream_t stream) {
  const int64_t channels = x.sizes[1];
  if (channels == 0 || x.numel() == 0) return cudaSuccess;
  const ChannelSplit split = channel_split(x);
  const int64_t m = split.m;
  MomentSums* partial = static_cast<MomentSums*>(scratch);
  double* mean = reinterpret_cast<double*>(partial + split.partials());
  visit_floating(x.dtype, [&]<class S>() {
    using T = compute_t<S>;
    const ChannelViews<const S> xv = channel_views<const S>(x);
    sum_moments(split, ValueTerm<S>{xv}, MeanFinish{mean, m}, partial, stream);
    const StatsFinish<T> stats{channel_vector<T>(&save_mean), channel_vector<T>(&save_invstd),
                               channel_vector<T>(running_mean), channel_vector<T>(running_var), mean, eps,
                               momentum, m};
    sum_moments(split, SquaredDeviationTerm<S>{xv, mean}, stats, partial, stream);
  });
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_backward_training(const Strided* dx, const Strided* dweight,
                                                const Strided* dbias, const Strided& dy,
                                                const Strided& x, const Strided& mean,
                                                const Strided& invstd, const Strided* weight,
                                                void* scratch, cudaStream_t stream) {
  const int64_t channels = x.sizes[1];
  if (channels == 0) return cudaSuccess;
  const ChannelSplit split = channel_split(x);
  MomentSums* partial = static_cast<MomentSums*>(scratch);
  MomentSums* totals = partial + split.partials();
  visit_floating(x.dtype, [&]<class S>() {
    using T = compute_t<S>;
    const GradTerm<S> term{channel_views<const S>(dy), channel_views<const S>(x), channel_vector<const T>(&mean),
                           channel_vector<const T>(&invstd)};
    sum_moments(split, term, GradFinish<T>{channel_vector<T>(dweight), channel_vector<T>(dbias), totals}, partial,
                stream);
    if (dx != nullptr && split.m > 0) launch_training_dx<S>(*dx, dy, x, mean, invstd, weight, totals, stream);
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
                                            void* scratch, cudaStream_t stream) {
  visit_floating(x.dtype, [&]<class S>() {
    using T = compute_t<S>;
    if (dx != nullptr) launch_channel_affine<S>(*dx, dy, nullptr, invstd, weight, nullptr, stream);
    if (dweight != nullptr || dbias != nullptr) {
      const GradTerm<S> term{channel_views<const S>(dy), channel_views<const S>(x),
                             channel_vector<const T>(&mean), channel_vector<const T>(&invstd)};
      sum_moments(channel_split(x), term,
                  GradFinish<T>{channel_vector<T>(dweight), channel_vector<T>(dbias), nullptr},
                  static_cast<MomentSums*>(scratch), stream);
    }
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
