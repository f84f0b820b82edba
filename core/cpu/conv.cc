// File: core/cpu/conv.cc
// im2col / col2im and the per-(image, group) GEMMs of 2-D convolution.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output,
// G groups, Cg = C / G and Kg = K / G channels per group.
//
// The column matrix of one image and group is col (Cg R S, P Q): row (c, r, s)
// holds the input pixel that filter tap (r, s) of channel c meets at each output
// position (0 in the padding). Then
//   forward  y_g (Kg, P Q)    = w_g (Kg, Cg R S) . col
//   dgrad    col              = w_g^T . dy_g, scattered back by col2im
//   wgrad    dw_g (Kg, Cg R S) += dy_g . col^T, summed over the batch
#include "core/cpu/conv.h"

#include <algorithm>
#include <vector>

#include "core/cpu/gemm.h"

namespace loom::cpu {
namespace {

// Sizes of one convolution, read off its input, filter and output views.
struct ConvShape {
  int64_t n, c, h, w;  // input
  int64_t k, r, s;     // filter
  int64_t p, q;        // output
  int64_t groups;

  int64_t cg() const { return c / groups; }
  int64_t kg() const { return k / groups; }
  int64_t col_rows() const { return cg() * r * s; }
  int64_t col_cols() const { return p * q; }
  int64_t image_size() const { return c * h * w; }
  int64_t output_size() const { return k * p * q; }
};

ConvShape conv_shape(const Shape& x, const Shape& w, const Shape& y, int64_t groups) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], groups};
}

// A 1x1 filter with stride 1 and no padding sees the image itself: col is the
// group's (Cg, H W) block of x, so im2col and col2im can be skipped.
bool is_pointwise(const ConvShape& cs, const ConvParams& pr) {
  return cs.r == 1 && cs.s == 1 && pr.stride_h == 1 && pr.stride_w == 1 && pr.pad_h == 0 &&
         pr.pad_w == 0;
}

// Calls fn(col_offset, image_offset) for every entry of col (Cg R S, P Q) whose
// input pixel lies inside the image; image_offset indexes one group's
// (Cg, H, W) block. Entries in the padding are skipped.
template <class Fn>
void for_each_tap(const ConvShape& cs, const ConvParams& pr, Fn&& fn) {
  int64_t col_offset = 0;
  for (int64_t c = 0; c < cs.cg(); ++c) {
    for (int64_t r = 0; r < cs.r; ++r) {
      for (int64_t s = 0; s < cs.s; ++s) {
        for (int64_t p = 0; p < cs.p; ++p) {
          int64_t ih = p * pr.stride_h - pr.pad_h + r * pr.dilation_h;
          bool row_inside = ih >= 0 && ih < cs.h;
          for (int64_t q = 0; q < cs.q; ++q, ++col_offset) {
            int64_t iw = q * pr.stride_w - pr.pad_w + s * pr.dilation_w;
            if (row_inside && iw >= 0 && iw < cs.w) fn(col_offset, (c * cs.h + ih) * cs.w + iw);
          }
        }
      }
    }
  }
}

template <class T>
void im2col(T* col, const T* image, const ConvShape& cs, const ConvParams& pr) {
  std::fill(col, col + cs.col_rows() * cs.col_cols(), T(0));
  for_each_tap(cs, pr, [&](int64_t co, int64_t io) { col[co] = image[io]; });
}

// The adjoint of im2col: every column entry is added back to the pixel it came
// from (pixels seen by several taps collect several terms).
template <class T>
void col2im(T* image, const T* col, const ConvShape& cs, const ConvParams& pr) {
  std::fill(image, image + cs.cg() * cs.h * cs.w, T(0));
  for_each_tap(cs, pr, [&](int64_t co, int64_t io) { image[io] += col[co]; });
}

// The column matrix of image n, group g: the image itself for pointwise
// filters, else `buffer` filled by im2col.
template <class T>
const T* columns(T* buffer, const T* x, int64_t n, int64_t g, const ConvShape& cs,
                 const ConvParams& pr) {
  const T* image = x + n * cs.image_size() + g * cs.cg() * cs.h * cs.w;
  if (is_pointwise(cs, pr)) return image;
  im2col(buffer, image, cs, pr);
  return buffer;
}

// Offsets of group g's block in the output (N, K, P, Q) and filter (K, Cg, R, S).
int64_t output_offset(int64_t n, int64_t g, const ConvShape& cs) {
  return n * cs.output_size() + g * cs.kg() * cs.col_cols();
}
int64_t filter_offset(int64_t g, const ConvShape& cs) { return g * cs.kg() * cs.col_rows(); }

template <class T>
void add_bias(T* y, const T* bias, const ConvShape& cs) {
  for (int64_t n = 0; n < cs.n; ++n) {
    for (int64_t k = 0; k < cs.k; ++k) {
      T* plane = y + n * cs.output_size() + k * cs.col_cols();
      for (int64_t i = 0; i < cs.col_cols(); ++i) plane[i] += bias[k];
    }
  }
}

template <class T>
void forward(T* y, const T* x, const T* w, const T* bias, const ConvShape& cs,
             const ConvParams& pr) {
  std::vector<T> buffer(is_pointwise(cs, pr) ? 0 : cs.col_rows() * cs.col_cols());
  for (int64_t n = 0; n < cs.n; ++n) {
    for (int64_t g = 0; g < cs.groups; ++g) {
      const T* col = columns(buffer.data(), x, n, g, cs, pr);
      gemm(false, false, cs.kg(), cs.col_cols(), cs.col_rows(), T(1), w + filter_offset(g, cs),
           cs.col_rows(), col, cs.col_cols(), T(0), y + output_offset(n, g, cs), cs.col_cols());
    }
  }
  if (bias != nullptr) add_bias(y, bias, cs);
}

template <class T>
void dgrad(T* dx, const T* dy, const T* w, const ConvShape& cs, const ConvParams& pr) {
  bool pointwise = is_pointwise(cs, pr);
  std::vector<T> buffer(pointwise ? 0 : cs.col_rows() * cs.col_cols());
  for (int64_t n = 0; n < cs.n; ++n) {
    for (int64_t g = 0; g < cs.groups; ++g) {
      T* image = dx + n * cs.image_size() + g * cs.cg() * cs.h * cs.w;
      T* col = pointwise ? image : buffer.data();
      gemm(true, false, cs.col_rows(), cs.col_cols(), cs.kg(), T(1), w + filter_offset(g, cs),
           cs.col_rows(), dy + output_offset(n, g, cs), cs.col_cols(), T(0), col, cs.col_cols());
      if (!pointwise) col2im(image, col, cs, pr);
    }
  }
}

template <class T>
void wgrad(T* dw, const T* dy, const T* x, const ConvShape& cs, const ConvParams& pr) {
  std::fill(dw, dw + cs.k * cs.col_rows(), T(0));
  std::vector<T> buffer(is_pointwise(cs, pr) ? 0 : cs.col_rows() * cs.col_cols());
  for (int64_t n = 0; n < cs.n; ++n) {
    for (int64_t g = 0; g < cs.groups; ++g) {
      const T* col = columns(buffer.data(), x, n, g, cs, pr);
      gemm(false, true, cs.kg(), cs.col_rows(), cs.col_cols(), T(1), dy + output_offset(n, g, cs),
           cs.col_cols(), col, cs.col_cols(), T(1), dw + filter_offset(g, cs), cs.col_rows());
    }
  }
}

}  // namespace

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                         int64_t dilation) {
  int64_t extent = dilation * (kernel - 1) + 1;  // span of the dilated filter
  int64_t padded = in + 2 * pad;
  return padded < extent ? 0 : (padded - extent) / stride + 1;
}

void conv2d_forward(const Strided& y, const Strided& x, const Strided& w, const Strided* bias,
                    const ConvParams& params) {
  ConvShape cs = conv_shape(x.sizes, w.sizes, y.sizes, params.groups);
  visit_float(y.dtype, [&]<class T>() {
    forward(y.ptr<T>(), x.ptr<T>(), w.ptr<T>(), bias ? bias->ptr<T>() : nullptr, cs, params);
  });
}

void conv2d_dgrad(const Strided& dx, const Strided& dy, const Strided& w,
                  const ConvParams& params) {
  ConvShape cs = conv_shape(dx.sizes, w.sizes, dy.sizes, params.groups);
  visit_float(dx.dtype,
              [&]<class T>() { dgrad(dx.ptr<T>(), dy.ptr<T>(), w.ptr<T>(), cs, params); });
}

void conv2d_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                  const ConvParams& params) {
  ConvShape cs = conv_shape(x.sizes, dw.sizes, dy.sizes, params.groups);
  visit_float(dw.dtype,
              [&]<class T>() { wgrad(dw.ptr<T>(), dy.ptr<T>(), x.ptr<T>(), cs, params); });
}

void conv2d_bgrad(const Strided& db, const Strided& dy) {
  int64_t n = dy.sizes[0], k = dy.sizes[1], pq = dy.sizes[2] * dy.sizes[3];
  visit_float(db.dtype, [&]<class T>() {
    const T* grad = dy.ptr<T>();
    for (int64_t channel = 0; channel < k; ++channel) {
      double total = 0.0;  // many terms: accumulate in double, as the reductions do
      for (int64_t image = 0; image < n; ++image) {
        const T* plane = grad + (image * k + channel) * pq;
        for (int64_t i = 0; i < pq; ++i) total += plane[i];
      }
      db.ptr<T>()[channel] = static_cast<T>(total);
    }
  });
}

}  // namespace loom::cpu
