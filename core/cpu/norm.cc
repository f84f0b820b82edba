// File: core/cpu/norm.cc
// Batch normalization as per-channel loops over strided views; see norm.h.
// N batch, C channels, M elements of one channel (all dims but dim 1).
#include "core/cpu/norm.h"

#include <cmath>

#include "core/cpu/loop.h"

namespace loom::cpu {
namespace {

// Channel c of a (N, C, ...) tensor, with dim 1 dropped: (N, ...) of M elements.
template <class T>
Strided channel(const Strided& t, int64_t c) {
  Strided view{t.ptr<T>() + c * t.strides[1], t.dtype, t.sizes, t.strides};
  view.sizes.erase(view.sizes.begin() + 1);
  view.strides.erase(view.strides.begin() + 1);
  return view;
}

// Element c of a per-channel vector (C).
template <class T>
T& element(const Strided& v, int64_t c) {
  return v.ptr<T>()[c * v.strides[0]];
}

template <class T>
T element_or(const std::optional<Strided>& v, int64_t c, T absent) {
  return v ? element<T>(*v, c) : absent;
}

// Sum of f(value) over one channel view.
template <class T, class Fn>
double channel_sum(const Strided& xc, Fn&& f) {
  const T* in = xc.ptr<T>();
  double sum = 0.0;
  for_each_offset<1>(xc.sizes, {&xc.strides}, [&](const auto& o) { sum += f(in[o[0]]); });
  return sum;
}

template <class T>
void blend(const RunningStats& running, int64_t c, double mean, double unbiased_var) {
  T& running_mean = element<T>(running.mean, c);
  T& running_var = element<T>(running.var, c);
  running_mean = static_cast<T>((1 - running.momentum) * running_mean + running.momentum * mean);
  running_var =
      static_cast<T>((1 - running.momentum) * running_var + running.momentum * unbiased_var);
}

// Per-channel sums of dy and dy * xhat, which every gradient is built from.
struct GradSums {
  double dy = 0.0;
  double dy_xhat = 0.0;
};

template <class T>
GradSums grad_sums(const Strided& dyc, const Strided& xc, double mean, double invstd) {
  const T* grad_out = dyc.ptr<T>();
  const T* in = xc.ptr<T>();
  GradSums sums;
  for_each_offset<2>(dyc.sizes, {&dyc.strides, &xc.strides}, [&](const auto& o) {
    sums.dy += grad_out[o[0]];
    sums.dy_xhat += grad_out[o[0]] * (in[o[1]] - mean) * invstd;
  });
  return sums;
}

// One channel of dx from its sums (formulas in norm.h).
template <class T>
void write_dx(const Strided& dxc, const Strided& dyc, const Strided& xc, double mean, double invstd,
              double weight, const GradSums& sums, bool training) {
  const double M = static_cast<double>(xc.numel());
  const double scale = weight * invstd;
  T* grad_in = dxc.ptr<T>();
  const T* grad_out = dyc.ptr<T>();
  const T* in = xc.ptr<T>();
  for_each_offset<3>(dxc.sizes, {&dxc.strides, &dyc.strides, &xc.strides}, [&](const auto& o) {
    double g = grad_out[o[1]];
    if (training) g -= (sums.dy + (in[o[2]] - mean) * invstd * sums.dy_xhat) / M;
    grad_in[o[0]] = static_cast<T>(scale * g);
  });
}

}  // namespace

void batch_norm_batch_stats(const Strided& save_mean, const Strided& save_invstd, const Strided& x,
                            double eps, const std::optional<RunningStats>& running) {
  visit_float(x.dtype, [&]<class T>() {
    for (int64_t c = 0; c < x.sizes[1]; ++c) {
      Strided xc = channel<T>(x, c);
      const double M = static_cast<double>(xc.numel());
      // Two passes: the mean first, so the variance does not cancel catastrophically.
      double mean = channel_sum<T>(xc, [](double v) { return v; }) / M;
      double var = channel_sum<T>(xc, [&](double v) { return (v - mean) * (v - mean); }) / M;
      element<T>(save_mean, c) = static_cast<T>(mean);
      element<T>(save_invstd, c) = static_cast<T>(1.0 / std::sqrt(var + eps));
      if (running) blend<T>(*running, c, mean, var * M / (M - 1));
    }
  });
}

void batch_norm_running_stats(const Strided& save_mean, const Strided& save_invstd,
                              const Strided& running_mean, const Strided& running_var, double eps) {
  visit_float(save_mean.dtype, [&]<class T>() {
    for (int64_t c = 0; c < save_mean.sizes[0]; ++c) {
      element<T>(save_mean, c) = element<T>(running_mean, c);
      double var = element<T>(running_var, c);
      element<T>(save_invstd, c) = static_cast<T>(1.0 / std::sqrt(var + eps));
    }
  });
}

void batch_norm_forward(const Strided& y, const Strided& x, const Strided& mean,
                        const Strided& invstd, const std::optional<Strided>& weight,
                        const std::optional<Strided>& bias) {
  visit_float(x.dtype, [&]<class T>() {
    for (int64_t c = 0; c < x.sizes[1]; ++c) {
      // y = x * scale + shift, with the per-channel constants folded once.
      const T scale = element<T>(invstd, c) * element_or<T>(weight, c, T(1));
      const T shift = element_or<T>(bias, c, T(0)) - element<T>(mean, c) * scale;
      Strided yc = channel<T>(y, c), xc = channel<T>(x, c);
      T* out = yc.ptr<T>();
      const T* in = xc.ptr<T>();
      for_each_offset<2>(yc.sizes, {&yc.strides, &xc.strides},
                         [&](const auto& o) { out[o[0]] = in[o[1]] * scale + shift; });
    }
  });
}

void batch_norm_backward(const std::optional<Strided>& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd,
                         const std::optional<Strided>& weight, bool training) {
  visit_float(x.dtype, [&]<class T>() {
    for (int64_t c = 0; c < x.sizes[1]; ++c) {
      const double mean_c = element<T>(mean, c), invstd_c = element<T>(invstd, c);
      Strided dyc = channel<T>(dy, c), xc = channel<T>(x, c);
      GradSums sums = grad_sums<T>(dyc, xc, mean_c, invstd_c);
      if (dbias) element<T>(*dbias, c) = static_cast<T>(sums.dy);
      if (dweight) element<T>(*dweight, c) = static_cast<T>(sums.dy_xhat);
      if (dx) {
        write_dx<T>(channel<T>(*dx, c), dyc, xc, mean_c, invstd_c, element_or<T>(weight, c, T(1)),
                    sums, training);
      }
    }
  });
}

}  // namespace loom::cpu
