// File: core/cpu/norm.cc
// Batch normalization as per-channel loops over strided views; see norm.h.
// N batch, C channels, M elements of one channel (all dims but dim 1).
#include "core/cpu/norm.h"

#include <cmath>

#include "core/cpu/accumulate.h"
#include "core/cpu/loop.h"
#include "core/kernel/activation.h"
#include "core/parallel.h"

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

// Sum of f(value) over one channel view, run by run (see accumulate.h).
template <class T, class Fn>
double channel_sum(const Strided& xc, Fn&& f) {
  const T* in = xc.ptr<T>();
  double sum = 0.0;
  for_each_run<1>(xc.sizes, {&xc.strides},
                  [&](const auto& o, int64_t len) { sum += sum_run(in + o[0], len, f); });
  return sum;
}

template <class T>
void blend(const kernel::RunningStats& running, int64_t c, double mean, double unbiased_var) {
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

// The per-channel sums; with yc (a ReLU's output after the norm), dy counts only
// where y > 0. kMask is a template parameter so the inner loop has no branch
// on it and vectorizes; eight partial sums as in accumulate.h.
template <class T, bool kMask>
GradSums grad_sums(const Strided& dyc, const Strided& xc, const Strided* yc, double mean,
                   double invstd) {
  const T* grad_out = dyc.ptr<T>();
  const T* in = xc.ptr<T>();
  const T* out = kMask ? yc->ptr<T>() : nullptr;
  const Shape& y_strides = kMask ? yc->strides : dyc.strides;
  GradSums sums;
  for_each_run<3>(dyc.sizes, {&dyc.strides, &xc.strides, &y_strides},
                  [&](const auto& o, int64_t len) {
                    const T* g = grad_out + o[0];
                    const T* v = in + o[1];
                    const T* y = kMask ? out + o[2] : nullptr;
                    auto term = [&](int64_t i) -> double {
                      if constexpr (kMask) return keep_if(y[i] > T(0), g[i]);
                      return g[i];
                    };
                    double dy[8] = {}, dy_x[8] = {};
                    int64_t i = 0;
                    for (; i + 8 <= len; i += 8) {
#pragma GCC unroll 8
                      for (int j = 0; j < 8; ++j) {
                        const double gi = term(i + j);
                        dy[j] += gi;
                        dy_x[j] += gi * (static_cast<double>(v[i + j]) - mean);
                      }
                    }
                    double dy_sum = 0.0, dy_x_sum = 0.0;
                    for (int j = 0; j < 8; ++j) {
                      dy_sum += dy[j];
                      dy_x_sum += dy_x[j];
                    }
                    for (; i < len; ++i) {
                      const double gi = term(i);
                      dy_sum += gi;
                      dy_x_sum += gi * (static_cast<double>(v[i]) - mean);
                    }
                    sums.dy += dy_sum;
                    sums.dy_xhat += dy_x_sum * invstd;
                  });
  return sums;
}

// One channel of dx from its sums (formulas in norm.h); with kMask, dy is first
// masked by y > 0, and with kPre dpre receives the masked dy. Per element in
// double, as the sums.
template <class T, bool kMask, bool kPre>
void write_dx(const Strided& dxc, const Strided& dyc, const Strided& xc, const Strided* yc,
              const Strided* dprec, double mean, double invstd, double weight,
              const GradSums& sums, bool training) {
  const double M = static_cast<double>(xc.numel());
  const double scale = weight * invstd;
  const double dy_mean = training ? sums.dy / M : 0.0;
  const double xhat_slope = training ? invstd * sums.dy_xhat / M : 0.0;  // per (x - mean)
  T* grad_in = dxc.ptr<T>();
  const T* grad_out = dyc.ptr<T>();
  const T* in = xc.ptr<T>();
  const T* out = kMask ? yc->ptr<T>() : nullptr;
  T* pre = kPre ? dprec->ptr<T>() : nullptr;
  const Shape& y_strides = kMask ? yc->strides : dyc.strides;
  const Shape& pre_strides = kPre ? dprec->strides : dxc.strides;
  for_each_run<5>(dxc.sizes, {&dxc.strides, &dyc.strides, &xc.strides, &y_strides, &pre_strides},
                  [&](const auto& o, int64_t len) {
                    T* d = grad_in + o[0];
                    const T* g = grad_out + o[1];
                    const T* v = in + o[2];
                    const T* y = kMask ? out + o[3] : nullptr;
                    T* p = kPre ? pre + o[4] : nullptr;
                    for (int64_t i = 0; i < len; ++i) {
                      T gi = g[i];
                      if constexpr (kMask) gi = keep_if(y[i] > T(0), gi);
                      if constexpr (kPre) p[i] = gi;
                      const double centered = static_cast<double>(v[i]) - mean;
                      d[i] = static_cast<T>(scale * (gi - dy_mean - centered * xhat_slope));
                    }
                  });
}

}  // namespace

void batch_norm_batch_stats(const Strided& save_mean, const Strided& save_invstd, const Strided& x,
                            double eps, const std::optional<kernel::RunningStats>& running) {
  visit_float(x.dtype, [&]<class T>() {
    parallel_for(0, x.sizes[1], 1, [&](int64_t c_begin, int64_t c_end) {
      for (int64_t c = c_begin; c < c_end; ++c) {
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

namespace {

// y = x * scale + shift (+ z) per channel, then max(., 0) with kRelu.
template <class T, bool kResidual, bool kRelu>
void normalize(const Strided& y, const Strided& x, const Strided& mean, const Strided& invstd,
               const std::optional<Strided>& weight, const std::optional<Strided>& bias,
               const std::optional<Strided>& residual) {
  parallel_for(0, x.sizes[1], 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      // The per-channel constants folded once.
      const T scale = element<T>(invstd, c) * element_or<T>(weight, c, T(1));
      const T shift = element_or<T>(bias, c, T(0)) - element<T>(mean, c) * scale;
      Strided yc = channel<T>(y, c), xc = channel<T>(x, c);
      Strided zc = kResidual ? channel<T>(*residual, c) : xc;
      T* out = yc.ptr<T>();
      const T* in = xc.ptr<T>();
      const T* add = zc.ptr<T>();
      for_each_run<3>(yc.sizes, {&yc.strides, &xc.strides, &zc.strides},
                      [&](const auto& o, int64_t len) {
                        T* yo = out + o[0];
                        const T* xi = in + o[1];
                        const T* zi = add + o[2];
                        for (int64_t i = 0; i < len; ++i) {
                          T v = xi[i] * scale + shift;
                          if constexpr (kResidual) v += zi[i];
                          if constexpr (kRelu) v = kernel::act::Relu::forward(v, T(0), T(0));
                          yo[i] = v;
                        }
                      });
    }
  });
}

// The batch-norm backward of every channel; y (a following ReLU's output) masks
// dy, and dpre receives the masked dy.
template <class T>
void backward_channels(const std::optional<Strided>& dx, const std::optional<Strided>& dweight,
                       const std::optional<Strided>& dbias, const std::optional<Strided>& dpre,
                       const Strided& dy, const Strided& x, const std::optional<Strided>& y,
                       const Strided& mean, const Strided& invstd,
                       const std::optional<Strided>& weight, bool training) {
  parallel_for(0, x.sizes[1], 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const double mean_c = element<T>(mean, c), invstd_c = element<T>(invstd, c);
      Strided dyc = channel<T>(dy, c), xc = channel<T>(x, c);
      std::optional<Strided> yc, dprec;
      if (y) yc = channel<T>(*y, c);
      if (dpre) dprec = channel<T>(*dpre, c);
      const Strided* ycp = yc ? &*yc : nullptr;
      const Strided* dprecp = dprec ? &*dprec : nullptr;
      GradSums sums = ycp ? grad_sums<T, true>(dyc, xc, ycp, mean_c, invstd_c)
                          : grad_sums<T, false>(dyc, xc, ycp, mean_c, invstd_c);
      if (dbias) element<T>(*dbias, c) = static_cast<T>(sums.dy);
      if (dweight) element<T>(*dweight, c) = static_cast<T>(sums.dy_xhat);
      if (dx) {
        const Strided dxc = channel<T>(*dx, c);
        const double w = element_or<T>(weight, c, T(1));
        if (dprecp) {
          write_dx<T, true, true>(dxc, dyc, xc, ycp, dprecp, mean_c, invstd_c, w, sums, training);
        } else if (ycp) {
          write_dx<T, true, false>(dxc, dyc, xc, ycp, dprecp, mean_c, invstd_c, w, sums, training);
        } else {
          write_dx<T, false, false>(dxc, dyc, xc, ycp, dprecp, mean_c, invstd_c, w, sums, training);
        }
      }
    }
  });
}

}  // namespace

void batch_norm_forward(const Strided& y, const Strided& x, const Strided& mean,
                        const Strided& invstd, const std::optional<Strided>& weight,
                        const std::optional<Strided>& bias) {
  visit_float(x.dtype, [&]<class T>() {
    normalize<T, false, false>(y, x, mean, invstd, weight, bias, std::nullopt);
  });
}

void batch_norm_relu_forward(const Strided& y, const Strided& x, const Strided& mean,
                             const Strided& invstd, const std::optional<Strided>& weight,
                             const std::optional<Strided>& bias,
                             const std::optional<Strided>& residual) {
  visit_float(x.dtype, [&]<class T>() {
    if (residual) {
      normalize<T, true, true>(y, x, mean, invstd, weight, bias, residual);
    } else {
      normalize<T, false, true>(y, x, mean, invstd, weight, bias, residual);
    }
  });
}

void batch_norm_backward(const std::optional<Strided>& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd,
                         const std::optional<Strided>& weight, bool training) {
  visit_float(x.dtype, [&]<class T>() {
    backward_channels<T>(dx, dweight, dbias, std::nullopt, dy, x, std::nullopt, mean, invstd,
                         weight, training);
  });
}

void batch_norm_relu_backward(const Strided& dx, const Strided& dweight, const Strided& dbias,
                              const std::optional<Strided>& dresidual, const Strided& dy,
                              const Strided& x, const Strided& y, const Strided& mean,
                              const Strided& invstd, const Strided& weight) {
  visit_float(x.dtype, [&]<class T>() {
    backward_channels<T>(dx, dweight, dbias, dresidual, dy, x, y, mean, invstd, weight,
                         /*training=*/true);
  });
}

}  // namespace loom::cpu
