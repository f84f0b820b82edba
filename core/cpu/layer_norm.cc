// File: core/cpu/layer_norm.cc
// Layer normalization over matrix rows; see layer_norm.h. N rows of D values.
// Rows are split over the pool for the statistics and dx; the column sums of
// the affine gradients are split by columns, each summing its columns over all
// rows in row order, so every value gets the same bits at any thread count.
#include "core/cpu/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/accumulate.h"
#include "core/cpu/loop.h"
#include "core/kernel/norm.h"
#include "core/parallel.h"

namespace loom::cpu {
namespace {

// Rows (or columns) per chunk: kFlatGrain values, as the elementwise loops
// take. A smaller split of vit_tiny's (8 x 17, 64) rows paid a fork-join per
// call, which on cores shared with other processes waits for a descheduled
// thread.
int64_t grain_for(int64_t values_per_index) {
  return std::max<int64_t>(1, kFlatGrain / std::max<int64_t>(values_per_index, 1));
}

constexpr const char* kOp = "cpu::layer_norm";

template <class T>
T* data_or_null(const std::optional<Strided>& v) {
  return v ? v->ptr<T>() : nullptr;
}

template <class T>
void forward_rows(const Strided& y, const Strided& mean, const Strided& invstd, const Strided& x, const T* w,
                  const T* b, double eps) {
  const int64_t n = x.sizes[0], d = x.sizes[1];
  parallel_for(0, n, grain_for(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* in = x.ptr<T>() + r * d;
      T* out = y.ptr<T>() + r * d;
      const double mu = sum_run(in, d, [](double v) { return v; }) / static_cast<double>(d);
      const double var = sum_run(in, d, [mu](double v) { return (v - mu) * (v - mu); }) / static_cast<double>(d);
      const double rstd = 1.0 / std::sqrt(var + eps);
      mean.ptr<T>()[r] = static_cast<T>(mu);
      invstd.ptr<T>()[r] = static_cast<T>(rstd);
      const T m = static_cast<T>(mu), s = static_cast<T>(rstd);
      for (int64_t j = 0; j < d; ++j) {
        const T xhat = (in[j] - m) * s;
        out[j] = xhat * (w ? w[j] : T(1)) + (b ? b[j] : T(0));
      }
    }
  });
}

// dx of rows [r0, r1): two row sums, then one pass.
template <class T>
void dx_rows(const Strided& dx, const Strided& dy, const Strided& x, const T* mean, const T* invstd, const T* w,
             int64_t r0, int64_t r1) {
  const int64_t d = x.sizes[1];
  for (int64_t r = r0; r < r1; ++r) {
    const T* g_out = dy.ptr<T>() + r * d;
    const T* in = x.ptr<T>() + r * d;
    T* out = dx.ptr<T>() + r * d;
    const T m = mean[r], s = invstd[r];
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double g = static_cast<double>(g_out[j]) * (w ? static_cast<double>(w[j]) : 1.0);
      sum_g += g;
      sum_g_xhat += g * static_cast<double>((in[j] - m) * s);
    }
    const T mean_g = static_cast<T>(sum_g / static_cast<double>(d));
    const T mean_g_xhat = static_cast<T>(sum_g_xhat / static_cast<double>(d));
    for (int64_t j = 0; j < d; ++j) {
      const T g = g_out[j] * (w ? w[j] : T(1));
      out[j] = s * (g - mean_g - (in[j] - m) * s * mean_g_xhat);
    }
  }
}

// dweight and dbias of columns [c0, c1), each summed over the rows in order.
template <class T>
void affine_columns(T* dw, T* db, const Strided& dy, const Strided& x, const T* mean, const T* invstd,
                    int64_t c0, int64_t c1) {
  const int64_t n = x.sizes[0], d = x.sizes[1], width = c1 - c0;
  std::vector<double> sum_dy(static_cast<size_t>(width), 0.0), sum_dy_xhat(static_cast<size_t>(width), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const T* g = dy.ptr<T>() + r * d + c0;
    const T* in = x.ptr<T>() + r * d + c0;
    const T m = mean[r], s = invstd[r];
    for (int64_t j = 0; j < width; ++j) {
      sum_dy[j] += static_cast<double>(g[j]);
      sum_dy_xhat[j] += static_cast<double>(g[j]) * static_cast<double>((in[j] - m) * s);
    }
  }
  for (int64_t j = 0; j < width; ++j) {
    if (db) db[c0 + j] = static_cast<T>(sum_dy[j]);
    if (dw) dw[c0 + j] = static_cast<T>(sum_dy_xhat[j]);
  }
}

}  // namespace

void layer_norm_forward(const Strided& y, const Strided& mean, const Strided& invstd, const Strided& x,
                        const std::optional<Strided>& weight, const std::optional<Strided>& bias, double eps) {
  kernel::check_layer_norm_forward(kOp, y, mean, invstd, x, weight, bias);
  visit_float(x.dtype, [&]<class T>() {
    forward_rows<T>(y, mean, invstd, x, data_or_null<T>(weight), data_or_null<T>(bias), eps);
  });
}

void layer_norm_backward(const Strided& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd, const std::optional<Strided>& weight) {
  const kernel::LayerNormOperands operands =
      kernel::check_layer_norm_backward(kOp, dx, dweight, dbias, dy, x, mean, invstd, weight);
  const int64_t n = operands.n(), d = operands.d();
  visit_float(x.dtype, [&]<class T>() {
    const T *m = mean.ptr<T>(), *s = invstd.ptr<T>(), *w = data_or_null<T>(weight);
    parallel_for(0, n, grain_for(d), [&](int64_t r0, int64_t r1) { dx_rows<T>(dx, dy, x, m, s, w, r0, r1); });
    T *dw = data_or_null<T>(dweight), *db = data_or_null<T>(dbias);
    if (dw == nullptr && db == nullptr) return;
    const int64_t column_grain = grain_for(n);
    parallel_for(0, d, column_grain, [&](int64_t c0, int64_t c1) { affine_columns<T>(dw, db, dy, x, m, s, c0, c1); });
  });
}

}  // namespace loom::cpu
