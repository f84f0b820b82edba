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
//
// Stride 1 (the common case) copies the image once into zero-padded planes and
// builds col from them without clipping: "wide" for the forward and dgrad (see
// WideShape, one copy per col row), at the output's width for wgrad.
#include "core/cpu/conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu/accumulate.h"
#include "core/cpu/gemm.h"
#include "core/kernel/activation.h"
#include "core/parallel.h"

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
bool is_pointwise(const ConvShape& cs, const kernel::ConvParams& pr) {
  return cs.r == 1 && cs.s == 1 && pr.stride_h == 1 && pr.stride_w == 1 && pr.pad_h == 0 &&
         pr.pad_w == 0;
}

// One output row p of col row (c, r, s), relative to a slice of col that starts
// at row row_begin: entries q in [q0, q1) read the input pixels
// image[in + (q - q0) * stride_w]; the others lie in the padding.
struct Segment {
  int64_t col;  // offset of the row segment's first entry in the slice
  int64_t in;   // offset of the pixel entry q0 reads, in one group's (Cg, H, W) block
  int64_t q0, q1;
};

// Calls fn(segment) for the P segments of each col row in [row_begin, row_end),
// in row-major order of col (so col2im adds every pixel's terms in one fixed order).
template <class Fn>
void for_each_segment(const ConvShape& cs, const kernel::ConvParams& pr, int64_t row_begin,
                      int64_t row_end, Fn&& fn) {
  const int64_t sw = pr.stride_w;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t c = row / (cs.r * cs.s), r = row / cs.s % cs.r, s = row % cs.s;
    const int64_t w_shift = s * pr.dilation_w - pr.pad_w;  // iw = q * sw + w_shift
    const int64_t q0 = std::min(cs.q, w_shift >= 0 ? 0 : (-w_shift + sw - 1) / sw);
    const int64_t past_end = cs.w - w_shift;  // q1 = ceil(past_end / sw), clipped
    const int64_t q1 = std::clamp(past_end <= 0 ? 0 : (past_end + sw - 1) / sw, q0, cs.q);
    for (int64_t p = 0; p < cs.p; ++p) {
      const int64_t col = ((row - row_begin) * cs.p + p) * cs.q;
      const int64_t ih = p * pr.stride_h - pr.pad_h + r * pr.dilation_h;
      if (ih < 0 || ih >= cs.h || q0 == q1) {
        fn(Segment{col, 0, 0, 0});
      } else {
        fn(Segment{col, (c * cs.h + ih) * cs.w + q0 * sw + w_shift, q0, q1});
      }
    }
  }
}

// Rows [row_begin, row_end) of col from one group's image block.
template <class T>
void im2col(T* col, const T* image, const ConvShape& cs, const kernel::ConvParams& pr, int64_t row_begin,
            int64_t row_end) {
  const int64_t sw = pr.stride_w;
  for_each_segment(cs, pr, row_begin, row_end, [&](const Segment& g) {
    T* out = col + g.col;
    std::fill(out, out + g.q0, T(0));
    if (sw == 1) {  // a short contiguous copy: a plain loop, not a memmove call
      const T* in = image + g.in;
      T* dst = out + g.q0;
      for (int64_t j = 0; j < g.q1 - g.q0; ++j) dst[j] = in[j];
    } else {
      for (int64_t q = g.q0, i = g.in; q < g.q1; ++q, i += sw) out[q] = image[i];
    }
    std::fill(out + g.q1, out + cs.q, T(0));
  });
}

// The adjoint of im2col: every column entry is added back to the pixel it came
// from (pixels seen by several taps collect several terms).
template <class T>
void col2im(T* image, const T* col, const ConvShape& cs, const kernel::ConvParams& pr) {
  std::fill(image, image + cs.cg() * cs.h * cs.w, T(0));
  const int64_t sw = pr.stride_w;
  for_each_segment(cs, pr, 0, cs.col_rows(), [&](const Segment& g) {
    const T* in = col + g.col;
    if (sw == 1) {
      T* dst = image + g.in;
      const T* src = in + g.q0;
      for (int64_t j = 0; j < g.q1 - g.q0; ++j) dst[j] += src[j];
      return;
    }
    for (int64_t q = g.q0, i = g.in; q < g.q1; ++q, i += sw) image[i] += in[q];
  });
}

// Rows [row_begin, row_end) of the column matrix of image n, group g: the image
// itself for pointwise filters, else `buffer` filled by im2col.
template <class T>
const T* columns(T* buffer, const T* x, int64_t n, int64_t g, const ConvShape& cs,
                 const kernel::ConvParams& pr, int64_t row_begin, int64_t row_end) {
  const T* image = x + n * cs.image_size() + g * cs.cg() * cs.h * cs.w;
  if (is_pointwise(cs, pr)) return image + row_begin * cs.col_cols();
  im2col(buffer, image, cs, pr, row_begin, row_end);
  return buffer;
}

// Offsets of group g's block in the output (N, K, P, Q) and filter (K, Cg, R, S).
int64_t output_offset(int64_t n, int64_t g, const ConvShape& cs) {
  return n * cs.output_size() + g * cs.kg() * cs.col_cols();
}
int64_t filter_offset(int64_t g, const ConvShape& cs) { return g * cs.kg() * cs.col_rows(); }

// The epilogue of one image's output (K, P Q): + bias, then ReLU when asked.
template <class T>
void finish_image(T* y, const T* bias, bool relu, const ConvShape& cs) {
  if (bias == nullptr && !relu) return;
  for (int64_t k = 0; k < cs.k; ++k) {
    T* plane = y + k * cs.col_cols();
    const T b = bias != nullptr ? bias[k] : T(0);
    for (int64_t i = 0; i < cs.col_cols(); ++i) {
      const T v = plane[i] + b;
      plane[i] = relu ? kernel::act::Relu::forward(v, T(0), T(0)) : v;
    }
  }
}

// ---- stride 1: wide columns ----------------------------------------------------------
//
// With stride 1, output (p, q) meets tap (c, r, s) at padded[c][p + r dh][q + s dw] of
// the zero-padded image (Hp, Wp). Computed for q over the whole padded width Wp
// instead of Q, a col row is then one contiguous run of the padded plane, P Wp
// entries from (r dh) Wp + s dw: one copy, no clipping. The "wide" output (P, Wp)
// is compacted to (P, Q); its columns q >= Q wrap into the next row and are dropped.
// The extra GEMM work is (Wp - Q) / Q, so narrow outputs keep the clipped im2col.
struct WideShape {
  int64_t hp = 0, wp = 0;  // the padded plane
  int64_t run = 0;         // P Wp: one wide col row, one wide output channel
  int64_t padded_size = 0;  // Cg planes, and the last run's overhang of (S - 1) dw

  int64_t plane() const { return hp * wp; }
};

WideShape wide_shape(const ConvShape& cs, const kernel::ConvParams& pr) {
  WideShape ws;
  ws.hp = cs.h + 2 * pr.pad_h;
  ws.wp = cs.w + 2 * pr.pad_w;
  ws.run = cs.p * ws.wp;
  ws.padded_size = cs.cg() * ws.plane() + (cs.s - 1) * pr.dilation_w;
  return ws;
}

bool use_wide(const ConvShape& cs, const kernel::ConvParams& pr) {
  if (pr.stride_h != 1 || pr.stride_w != 1 || is_pointwise(cs, pr) || cs.p == 0 || cs.q == 0) {
    return false;
  }
  return 2 * (cs.w + 2 * pr.pad_w) <= 3 * cs.q;  // at most 50% more GEMM columns
}

// Channels [c_begin, c_end) of one group's image block (Cg, H, W) into their
// zero-padded planes; the overhang after the last plane is zeroed too.
template <class T>
void pad_planes(T* padded, const T* image, const ConvShape& cs, const kernel::ConvParams& pr,
                const WideShape& ws, int64_t c_begin, int64_t c_end) {
  std::fill(padded + c_begin * ws.plane(), padded + c_end * ws.plane(), T(0));
  if (c_end == cs.cg()) std::fill(padded + c_end * ws.plane(), padded + ws.padded_size, T(0));
  for (int64_t c = c_begin; c < c_end; ++c) {
    for (int64_t h = 0; h < cs.h; ++h) {
      std::memcpy(padded + c * ws.plane() + (h + pr.pad_h) * ws.wp + pr.pad_w,
                  image + (c * cs.h + h) * cs.w, cs.w * sizeof(T));
    }
  }
}

// Wide col rows [row_begin, row_end) from the padded planes.
template <class T>
void wide_columns(T* col, const T* padded, const ConvShape& cs, const kernel::ConvParams& pr,
                  const WideShape& ws, int64_t row_begin, int64_t row_end) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t c = row / (cs.r * cs.s), r = row / cs.s % cs.r, s = row % cs.s;
    T* dst = col + (row - row_begin) * ws.run;
    std::memcpy(dst, padded + c * ws.plane() + r * pr.dilation_h * ws.wp + s * pr.dilation_w,
                ws.run * sizeof(T));
  }
}

// One image's gradient (K, P, Q) spread to the wide layout (K, P Wp), zeros in the
// wrapped columns.
template <class T>
void widen_output(T* wide, const T* dy, const ConvShape& cs, const WideShape& ws) {
  for (int64_t kp = 0; kp < cs.k * cs.p; ++kp) {
    T* dst = wide + kp * ws.wp;
    std::memcpy(dst, dy + kp * cs.q, cs.q * sizeof(T));
    std::fill(dst + cs.q, dst + ws.wp, T(0));
  }
}

// The wide output of one group (Kg, P Wp) into y's (Kg, P, Q) block, with the
// epilogue: + bias (Kg entries, or null), then ReLU when asked.
template <class T>
void compact_output(T* y, const T* wide, const T* bias, bool relu, const ConvShape& cs,
                    const WideShape& ws) {
  for (int64_t k = 0; k < cs.kg(); ++k) {
    const T b = bias != nullptr ? bias[k] : T(0);
    for (int64_t p = 0; p < cs.p; ++p) {
      const T* src = wide + k * ws.run + p * ws.wp;
      T* dst = y + (k * cs.p + p) * cs.q;
      for (int64_t q = 0; q < cs.q; ++q) {
        const T v = src[q] + b;
        dst[q] = relu ? kernel::act::Relu::forward(v, T(0), T(0)) : v;
      }
    }
  }
}

template <class T>
void forward_wide(T* y, const T* x, const T* w, const T* bias, bool relu, const ConvShape& cs,
                  const kernel::ConvParams& pr) {
  const WideShape ws = wide_shape(cs, pr);
  parallel_for(0, cs.n, 1, [&](int64_t n_begin, int64_t n_end) {
    std::vector<T> padded(ws.padded_size), col(cs.col_rows() * ws.run), wide(cs.kg() * ws.run);
    for (int64_t n = n_begin; n < n_end; ++n) {
      for (int64_t g = 0; g < cs.groups; ++g) {
        pad_planes(padded.data(), x + n * cs.image_size() + g * cs.cg() * cs.h * cs.w, cs, pr, ws,
                   0, cs.cg());
        wide_columns(col.data(), padded.data(), cs, pr, ws, 0, cs.col_rows());
        gemm(false, false, cs.kg(), ws.run, cs.col_rows(), T(1), w + filter_offset(g, cs),
             cs.col_rows(), col.data(), ws.run, T(0), wide.data(), ws.run);
        compact_output(y + output_offset(n, g, cs), wide.data(),
                       bias != nullptr ? bias + g * cs.kg() : nullptr, relu, cs, ws);
      }
    }
  });
}

// col = w_g^T . dy_g over the wide columns (zero where dy was widened), added back
// into the padded planes run by run in col's row order, then the planes' interior
// is dx.
template <class T>
void dgrad_wide(T* dx, const T* dy, const T* w, const ConvShape& cs, const kernel::ConvParams& pr) {
  const WideShape ws = wide_shape(cs, pr);
  parallel_for(0, cs.n, 1, [&](int64_t n_begin, int64_t n_end) {
    std::vector<T> wide(cs.k * ws.run), col(cs.col_rows() * ws.run), padded(ws.padded_size);
    for (int64_t n = n_begin; n < n_end; ++n) {
      widen_output(wide.data(), dy + n * cs.output_size(), cs, ws);
      for (int64_t g = 0; g < cs.groups; ++g) {
        gemm(true, false, cs.col_rows(), ws.run, cs.kg(), T(1), w + filter_offset(g, cs),
             cs.col_rows(), wide.data() + g * cs.kg() * ws.run, ws.run, T(0), col.data(), ws.run);
        std::fill(padded.begin(), padded.end(), T(0));
        for (int64_t row = 0; row < cs.col_rows(); ++row) {
          const int64_t c = row / (cs.r * cs.s), r = row / cs.s % cs.r, s = row % cs.s;
          T* dst = padded.data() + c * ws.plane() + r * pr.dilation_h * ws.wp + s * pr.dilation_w;
          const T* src = col.data() + row * ws.run;
          for (int64_t j = 0; j < ws.run; ++j) dst[j] += src[j];
        }
        T* image = dx + n * cs.image_size() + g * cs.cg() * cs.h * cs.w;
        for (int64_t c = 0; c < cs.cg(); ++c) {
          for (int64_t h = 0; h < cs.h; ++h) {
            std::memcpy(image + (c * cs.h + h) * cs.w,
                        padded.data() + c * ws.plane() + (h + pr.pad_h) * ws.wp + pr.pad_w,
                        cs.w * sizeof(T));
          }
        }
      }
    }
  });
}

// Col rows [row_begin, row_end) at the output's own width, read from the padded
// planes: each (row, p) is one unclipped copy of Q entries.
template <class T>
void padded_columns(T* col, const T* padded, const ConvShape& cs, const kernel::ConvParams& pr,
                    const WideShape& ws, int64_t row_begin, int64_t row_end) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t c = row / (cs.r * cs.s), r = row / cs.s % cs.r, s = row % cs.s;
    const T* src = padded + c * ws.plane() + r * pr.dilation_h * ws.wp + s * pr.dilation_w;
    T* dst = col + (row - row_begin) * cs.col_cols();
    for (int64_t p = 0; p < cs.p; ++p) {
      for (int64_t q = 0; q < cs.q; ++q) dst[p * cs.q + q] = src[p * ws.wp + q];
    }
  }
}

// Images are independent: each chunk of the batch gets its own column buffer.
template <class T>
void forward(T* y, const T* x, const T* w, const T* bias, bool relu, const ConvShape& cs,
             const kernel::ConvParams& pr) {
  if (use_wide(cs, pr)) return forward_wide(y, x, w, bias, relu, cs, pr);
  parallel_for(0, cs.n, 1, [&](int64_t n_begin, int64_t n_end) {
    std::vector<T> buffer(is_pointwise(cs, pr) ? 0 : cs.col_rows() * cs.col_cols());
    for (int64_t n = n_begin; n < n_end; ++n) {
      for (int64_t g = 0; g < cs.groups; ++g) {
        const T* col = columns(buffer.data(), x, n, g, cs, pr, 0, cs.col_rows());
        gemm(false, false, cs.kg(), cs.col_cols(), cs.col_rows(), T(1), w + filter_offset(g, cs),
             cs.col_rows(), col, cs.col_cols(), T(0), y + output_offset(n, g, cs), cs.col_cols());
      }
      finish_image(y + n * cs.output_size(), bias, relu, cs);
    }
  });
}

template <class T>
void dgrad(T* dx, const T* dy, const T* w, const ConvShape& cs, const kernel::ConvParams& pr) {
  if (use_wide(cs, pr)) return dgrad_wide(dx, dy, w, cs, pr);
  const bool pointwise = is_pointwise(cs, pr);
  parallel_for(0, cs.n, 1, [&](int64_t n_begin, int64_t n_end) {
    std::vector<T> buffer(pointwise ? 0 : cs.col_rows() * cs.col_cols());
    for (int64_t n = n_begin; n < n_end; ++n) {
      for (int64_t g = 0; g < cs.groups; ++g) {
        T* image = dx + n * cs.image_size() + g * cs.cg() * cs.h * cs.w;
        T* col = pointwise ? image : buffer.data();
        gemm(true, false, cs.col_rows(), cs.col_cols(), cs.kg(), T(1), w + filter_offset(g, cs),
             cs.col_rows(), dy + output_offset(n, g, cs), cs.col_cols(), T(0), col, cs.col_cols());
        if (!pointwise) col2im(image, col, cs, pr);
      }
    }
  });
}

// The col rows wgrad multiplies dy with, built in buffers of one parallel chunk:
// with stride 1 unclipped from padded planes (only the channels the rows read),
// else by the clipped im2col (or the image itself for a pointwise filter).
template <class T>
class WgradColumns {
 public:
  WgradColumns(const T* x, const ConvShape& cs, const kernel::ConvParams& pr, int64_t max_rows)
      : x_(x), cs_(cs), pr_(pr), ws_(wide_shape(cs, pr)),
        padded_(pr.stride_h == 1 && pr.stride_w == 1 && !is_pointwise(cs, pr)),
        planes_(padded_ ? ws_.padded_size : 0),
        col_(is_pointwise(cs, pr) ? 0 : max_rows * cs.col_cols()) {}

  // Rows [row_begin, row_end) of image n, group g's col (P Q columns each).
  const T* rows(int64_t n, int64_t g, int64_t row_begin, int64_t row_end) {
    if (!padded_) return columns(col_.data(), x_, n, g, cs_, pr_, row_begin, row_end);
    const int64_t taps = cs_.r * cs_.s;
    pad_planes(planes_.data(), x_ + n * cs_.image_size() + g * cs_.cg() * cs_.h * cs_.w, cs_, pr_,
               ws_, row_begin / taps, (row_end - 1) / taps + 1);
    padded_columns(col_.data(), planes_.data(), cs_, pr_, ws_, row_begin, row_end);
    return col_.data();
  }

 private:
  const T* x_;
  const ConvShape& cs_;
  const kernel::ConvParams& pr_;
  WideShape ws_;
  bool padded_;
  std::vector<T> planes_, col_;
};

// dw's columns (the rows of col) split over the chunks; each element of dw is
// summed by one thread, image by image in order, whatever the thread count (the
// bits may still move with it: core/parallel.h on BLAS products).
template <class T>
void wgrad_by_rows(T* dw, const T* dy, const T* x, const ConvShape& cs, const kernel::ConvParams& pr) {
  std::fill(dw, dw + cs.k * cs.col_rows(), T(0));
  parallel_for(0, cs.col_rows(), 1, [&](int64_t row_begin, int64_t row_end) {
    const int64_t rows = row_end - row_begin;
    WgradColumns<T> source(x, cs, pr, rows);
    for (int64_t n = 0; n < cs.n; ++n) {
      for (int64_t g = 0; g < cs.groups; ++g) {
        gemm(false, true, cs.kg(), rows, cs.col_cols(), T(1), dy + output_offset(n, g, cs),
             cs.col_cols(), source.rows(n, g, row_begin, row_end), cs.col_cols(), T(1),
             dw + filter_offset(g, cs) + row_begin, cs.col_rows());
      }
    }
  });
}

// A small filter has too few columns to split well (each chunk's GEMMs shrink and
// every chunk builds the same padded planes): the batch is cut instead into a
// fixed number of image blocks, set by N alone, each summed into a partial dw of
// its own in image order; the partials are then added in block order. The bits
// depend on N, never on the thread count.
constexpr int64_t kWgradBlocks = 16;
constexpr int64_t kWgradPartialsLimit = int64_t{1} << 20;  // elements of all partials

bool wgrad_splits_images(const ConvShape& cs) {
  return cs.n > 0 && std::min(cs.n, kWgradBlocks) * cs.k * cs.col_rows() <= kWgradPartialsLimit;
}

template <class T>
void wgrad_by_images(T* dw, const T* dy, const T* x, const ConvShape& cs, const kernel::ConvParams& pr) {
  const int64_t blocks = std::min(cs.n, kWgradBlocks), per_block = (cs.n + blocks - 1) / blocks;
  const int64_t size = cs.k * cs.col_rows();
  std::vector<T> partial(blocks * size, T(0));
  parallel_for(0, blocks, 1, [&](int64_t b_begin, int64_t b_end) {
    WgradColumns<T> source(x, cs, pr, cs.col_rows());
    for (int64_t b = b_begin; b < b_end; ++b) {
      for (int64_t n = b * per_block; n < std::min(cs.n, (b + 1) * per_block); ++n) {
        for (int64_t g = 0; g < cs.groups; ++g) {
          gemm(false, true, cs.kg(), cs.col_rows(), cs.col_cols(), T(1),
               dy + output_offset(n, g, cs), cs.col_cols(), source.rows(n, g, 0, cs.col_rows()),
               cs.col_cols(), T(1), partial.data() + b * size + filter_offset(g, cs),
               cs.col_rows());
        }
      }
    }
  });
  for (int64_t i = 0; i < size; ++i) {
    T sum = partial[i];
    for (int64_t b = 1; b < blocks; ++b) sum += partial[b * size + i];
    dw[i] = sum;
  }
}

template <class T>
void wgrad(T* dw, const T* dy, const T* x, const ConvShape& cs, const kernel::ConvParams& pr) {
  if (wgrad_splits_images(cs)) return wgrad_by_images(dw, dy, x, cs, pr);
  wgrad_by_rows(dw, dy, x, cs, pr);
}

}  // namespace

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                         int64_t dilation) {
  int64_t extent = dilation * (kernel - 1) + 1;  // span of the dilated filter
  int64_t padded = in + 2 * pad;
  return padded < extent ? 0 : (padded - extent) / stride + 1;
}

void conv2d_forward(const Strided& y, const Strided& x, const Strided& w, const Strided* bias,
                    const kernel::ConvParams& params, bool relu) {
  ConvShape cs = conv_shape(x.sizes, w.sizes, y.sizes, params.groups);
  visit_float(y.dtype, [&]<class T>() {
    forward(y.ptr<T>(), x.ptr<T>(), w.ptr<T>(), bias ? bias->ptr<T>() : nullptr, relu, cs,
            params);
  });
}

void conv2d_dgrad(const Strided& dx, const Strided& dy, const Strided& w,
                  const kernel::ConvParams& params) {
  ConvShape cs = conv_shape(dx.sizes, w.sizes, dy.sizes, params.groups);
  visit_float(dx.dtype,
              [&]<class T>() { dgrad(dx.ptr<T>(), dy.ptr<T>(), w.ptr<T>(), cs, params); });
}

void conv2d_wgrad(const Strided& dw, const Strided& dy, const Strided& x,
                  const kernel::ConvParams& params) {
  ConvShape cs = conv_shape(x.sizes, dw.sizes, dy.sizes, params.groups);
  visit_float(dw.dtype,
              [&]<class T>() { wgrad(dw.ptr<T>(), dy.ptr<T>(), x.ptr<T>(), cs, params); });
}

void conv2d_bgrad(const Strided& db, const Strided& dy) {
  int64_t n = dy.sizes[0], k = dy.sizes[1], pq = dy.sizes[2] * dy.sizes[3];
  visit_float(db.dtype, [&]<class T>() {
    const T* grad = dy.ptr<T>();
    parallel_for(0, k, 1, [&](int64_t k_begin, int64_t k_end) {
      for (int64_t channel = k_begin; channel < k_end; ++channel) {
        double total = 0.0;  // many terms: accumulate in double, as the reductions do
        for (int64_t image = 0; image < n; ++image) {
          total += sum_run(grad + (image * k + channel) * pq, pq, [](double v) { return v; });
        }
        db.ptr<T>()[channel] = static_cast<T>(total);
      }
    });
  });
}

}  // namespace loom::cpu
