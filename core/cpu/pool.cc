// File: core/cpu/pool.cc
// Pooling as direct loops over each window of each (H, W) plane; see pool.h.
// N batch, C channels, H, W input plane, P, Q output plane.
#include "core/cpu/pool.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/parallel.h"

namespace loom::cpu {
namespace {

// One (rows, cols) plane of a 4-D strided tensor, indexed (h, w).
template <class T>
struct Plane {
  T* data;
  int64_t stride_h, stride_w;
  T& operator()(int64_t h, int64_t w) const { return data[h * stride_h + w * stride_w]; }
};

template <class T>
Plane<T> plane(const Strided& t, int64_t n, int64_t c) {
  return {t.ptr<T>() + n * t.strides[0] + c * t.strides[1], t.strides[2], t.strides[3]};
}

// Calls fn(n, c) for every plane of a (N, C, ., .) tensor; planes are
// independent, so they are split over the thread pool.
template <class Fn>
void for_each_plane(const Strided& t, Fn&& fn) {
  const int64_t channels = t.sizes[1];
  parallel_for(0, t.sizes[0] * channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i / channels, i % channels);
  });
}

template <class T>
void zero_plane(const Plane<T>& plane, int64_t rows, int64_t cols) {
  for (int64_t h = 0; h < rows; ++h) {
    for (int64_t w = 0; w < cols; ++w) plane(h, w) = T(0);
  }
}

// The input rows [h0, h1) and columns [w0, w1) a window covers, and its size
// clipped only to the padded extent, which is PyTorch's count_include_pad divisor
// (with ceil_mode the last window may hang past the right padding).
struct Window {
  int64_t h0, h1, w0, w1;
  int64_t padded_count;
  int64_t count() const { return (h1 - h0) * (w1 - w0); }
  int64_t divisor(bool count_include_pad) const {
    return count_include_pad ? padded_count : count();
  }
};

Window window_at(const kernel::Pool2dParams& p, int64_t row, int64_t col, int64_t H, int64_t W) {
  int64_t h0 = row * p.stride_h - p.pad_h, w0 = col * p.stride_w - p.pad_w;
  int64_t h1 = std::min(h0 + p.kernel_h, H + p.pad_h);
  int64_t w1 = std::min(w0 + p.kernel_w, W + p.pad_w);
  int64_t padded_count = (h1 - h0) * (w1 - w0);
  return {std::max<int64_t>(h0, 0), std::min(h1, H), std::max<int64_t>(w0, 0), std::min(w1, W),
          padded_count};
}

// Calls fn(p, q, window) for every output position of a (P, Q) plane over (H, W).
template <class Fn>
void for_each_window(const kernel::Pool2dParams& params, int64_t P, int64_t Q, int64_t H, int64_t W,
                     Fn&& fn) {
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t q = 0; q < Q; ++q) fn(p, q, window_at(params, p, q, H, W));
  }
}

// The window's max and its flat index h * W + w; a NaN propagates, as in PyTorch.
template <class T>
std::pair<T, int64_t> window_max(const Plane<const T>& in, const Window& win, int64_t W) {
  T best = -std::numeric_limits<T>::infinity();
  int64_t best_index = win.h0 * W + win.w0;
  for (int64_t h = win.h0; h < win.h1; ++h) {
    for (int64_t w = win.w0; w < win.w1; ++w) {
      if (in(h, w) > best || std::isnan(in(h, w))) {
        best = in(h, w);
        best_index = h * W + w;
      }
    }
  }
  return {best, best_index};
}

template <class T>
double window_sum(const Plane<const T>& in, const Window& win) {
  double sum = 0.0;
  for (int64_t h = win.h0; h < win.h1; ++h) {
    for (int64_t w = win.w0; w < win.w1; ++w) sum += in(h, w);
  }
  return sum;
}

template <class T>
void add_to_window(const Plane<T>& grad_in, const Window& win, T value) {
  for (int64_t h = win.h0; h < win.h1; ++h) {
    for (int64_t w = win.w0; w < win.w1; ++w) grad_in(h, w) += value;
  }
}

// One window's candidate in the scan order of window_max: the same comparison,
// so the fast path below picks the same element.
// Branch-free (selects, not jumps): which element wins is data-dependent and
// unpredictable.
template <class T>
void consider(T value, int64_t index, T& best, int64_t& best_index) {
  const bool take = value > best || value != value;  // value != value: NaN
  best = take ? value : best;
  best_index = take ? index : best_index;
}

// The common 2x2, stride 2, unpadded pooling with every window inside the
// plane: no window bounds to compute or clip.
bool is_plain_2x2(const kernel::Pool2dParams& p, int64_t P, int64_t Q, int64_t H, int64_t W) {
  return p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 &&
         p.pad_h == 0 && p.pad_w == 0 && 2 * P <= H && 2 * Q <= W;
}

// A signed integer that orders floats as < does, -0 and +0 equal, every NaN the
// largest key. The 2x2 kernel below compares keys with integer arithmetic only:
// float compares (which may trap on a NaN) compile to branches, and which
// element of a window wins is unpredictable.
template <class T>
auto order_key(T v) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  const I bits = std::bit_cast<I>(v);
  const I magnitude = bits & std::numeric_limits<I>::max();
  if (magnitude > std::bit_cast<I>(std::numeric_limits<T>::infinity())) {
    return std::numeric_limits<I>::max();
  }
  const I sign = bits >> (8 * sizeof(I) - 1);  // 0, or -1 for a negative number
  return (magnitude ^ sign) - sign;
}

// 1 when `key` would replace `best` in consider()'s scan (larger, or a NaN), else 0.
template <class I>
I takes(I key, I best) {
  return I(key > best) | I(key == std::numeric_limits<I>::max());
}

// flag (0 or 1) ? when_true : when_false, as arithmetic rather than a branch.
template <class I>
I pick(I when_false, I when_true, I flag) {
  return when_false ^ ((when_false ^ when_true) & -flag);
}

// One output row of the 2x2 pooling over dense input rows top and bottom (2p and
// 2p + 1); `index` is the flat index of top[0]. Pairwise (the top pair, the
// bottom pair, then the bottom's winner against the top's) this picks what
// consider() picks in scan order: the first maximum, or the last NaN.
template <class T>
void max_pool_2x2_dense_row(const T* top, const T* bottom, T* out, int64_t* argmax, int64_t Q,
                            int64_t index, int64_t W) {
  using I = decltype(order_key(T()));
  const int64_t down_step = bottom - top;
  for (int64_t q = 0; q < Q; ++q) {
    const I tl = order_key(top[2 * q]), tr = order_key(top[2 * q + 1]);
    const I bl = order_key(bottom[2 * q]), br = order_key(bottom[2 * q + 1]);
    const I right_top = takes(tr, tl), right_bottom = takes(br, bl);
    const I down = takes(pick(bl, br, right_bottom), pick(tl, tr, right_top));
    const int64_t column = 2 * q + pick(right_top, right_bottom, down);
    out[q] = top[column + down * down_step];
    argmax[q] = index + column + down * W;
  }
}

// The same choice for four float windows at once, in GCC's generic vectors (SSE2
// here): lanes of 32-bit keys, compares that yield all-ones masks, and selects
// by mask. top and bottom hold 8 floats each; the chosen values go to out[0..4),
// and code[j] is bit 0 the right column, bit 1 the bottom row of window j.
using Int4 = int32_t __attribute__((vector_size(16)));

struct Columns4 {
  Int4 left, right;  // the bits of the windows' left and right elements
};

Columns4 load_windows(const float* row) {
  Int4 a, b;
  std::memcpy(&a, row, sizeof(a));
  std::memcpy(&b, row + 4, sizeof(b));
#if defined(__clang__)  // the fuzz build
  return {__builtin_shufflevector(a, b, 0, 2, 4, 6), __builtin_shufflevector(a, b, 1, 3, 5, 7)};
#else
  return {__builtin_shuffle(a, b, Int4{0, 2, 4, 6}), __builtin_shuffle(a, b, Int4{1, 3, 5, 7})};
#endif
}

Int4 order_keys(Int4 bits) {  // order_key() of four floats
  const Int4 magnitude = bits & std::numeric_limits<int32_t>::max();
  const Int4 sign = bits >> 31;
  const Int4 nan = magnitude > std::bit_cast<int32_t>(std::numeric_limits<float>::infinity());
  return (nan & std::numeric_limits<int32_t>::max()) | (~nan & ((magnitude ^ sign) - sign));
}

Int4 takes4(Int4 key, Int4 best) { return (key > best) | (key == std::numeric_limits<int32_t>::max()); }
Int4 select4(Int4 flag, Int4 when_true, Int4 when_false) { return (flag & when_true) | (~flag & when_false); }

Int4 max_pool_2x2_windows4(const float* top, const float* bottom, float* out) {
  const Columns4 t = load_windows(top), b = load_windows(bottom);
  const Int4 tl = order_keys(t.left), tr = order_keys(t.right);
  const Int4 bl = order_keys(b.left), br = order_keys(b.right);
  const Int4 right_top = takes4(tr, tl), right_bottom = takes4(br, bl);
  const Int4 down = takes4(select4(right_bottom, br, bl), select4(right_top, tr, tl));
  const Int4 value =
      select4(down, select4(right_bottom, b.right, b.left), select4(right_top, t.right, t.left));
  std::memcpy(out, &value, sizeof(value));
  return (select4(down, right_bottom, right_top) & 1) | (down & 2);
}

// max_pool_2x2_dense_row, four windows at a time where T is float.
template <class T>
void max_pool_2x2_row(const T* top, const T* bottom, T* out, int64_t* argmax, int64_t Q,
                      int64_t index, int64_t W) {
  int64_t q = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; q + 4 <= Q; q += 4) {
      const Int4 code = max_pool_2x2_windows4(top + 2 * q, bottom + 2 * q, out + q);
      for (int j = 0; j < 4; ++j) {
        argmax[q + j] = index + 2 * (q + j) + (code[j] & 1) + (code[j] >> 1) * W;
      }
    }
  }
  max_pool_2x2_dense_row(top + 2 * q, bottom + 2 * q, out + q, argmax + q, Q - q, index + 2 * q, W);
}

template <class T>
void max_pool_2x2_plane(const Plane<const T>& in, const Plane<T>& out,
                        const Plane<int64_t>& argmax, int64_t P, int64_t Q, int64_t W) {
  if (in.stride_w == 1 && out.stride_w == 1 && argmax.stride_w == 1) {
    for (int64_t p = 0; p < P; ++p) {
      const T* top = &in(2 * p, 0);
      max_pool_2x2_row(top, top + in.stride_h, &out(p, 0), &argmax(p, 0), Q, 2 * p * W, W);
    }
    return;
  }
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t q = 0; q < Q; ++q) {
      const int64_t h = 2 * p, w = 2 * q;
      T best = -std::numeric_limits<T>::infinity();
      int64_t best_index = h * W + w;
      consider(in(h, w), h * W + w, best, best_index);
      consider(in(h, w + 1), h * W + w + 1, best, best_index);
      consider(in(h + 1, w), (h + 1) * W + w, best, best_index);
      consider(in(h + 1, w + 1), (h + 1) * W + w + 1, best, best_index);
      out(p, q) = best;
      argmax(p, q) = best_index;
    }
  }
}

}  // namespace

void max_pool2d_forward(const Strided& y, const Strided& indices, const Strided& x,
                        const kernel::Pool2dParams& params) {
  visit_float(x.dtype, [&]<class T>() {
    const int64_t H = x.sizes[2], W = x.sizes[3];
    for_each_plane(y, [&](int64_t n, int64_t c) {
      Plane<const T> in = plane<const T>(x, n, c);
      Plane<T> out = plane<T>(y, n, c);
      Plane<int64_t> argmax = plane<int64_t>(indices, n, c);
      if (is_plain_2x2(params, y.sizes[2], y.sizes[3], H, W)) {
        return max_pool_2x2_plane(in, out, argmax, y.sizes[2], y.sizes[3], W);
      }
      for_each_window(params, y.sizes[2], y.sizes[3], H, W,
                      [&](int64_t p, int64_t q, const Window& win) {
                        std::tie(out(p, q), argmax(p, q)) = window_max(in, win, W);
                      });
    });
  });
}

void max_pool2d_backward(const Strided& dx, const Strided& dy, const Strided& indices) {
  visit_float(dx.dtype, [&]<class T>() {
    const int64_t H = dx.sizes[2], W = dx.sizes[3];
    for_each_plane(dx, [&](int64_t n, int64_t c) {
      Plane<T> grad_in = plane<T>(dx, n, c);
      Plane<const T> grad_out = plane<const T>(dy, n, c);
      Plane<const int64_t> argmax = plane<const int64_t>(indices, n, c);
      // A dense plane takes the flat index as its offset (no division per element).
      const bool dense = grad_in.stride_w == 1 && grad_in.stride_h == W;
      if (dense) {
        std::fill(grad_in.data, grad_in.data + H * W, T(0));
      } else {
        zero_plane(grad_in, H, W);
      }
      for (int64_t p = 0; p < dy.sizes[2]; ++p) {
        for (int64_t q = 0; q < dy.sizes[3]; ++q) {
          const int64_t index = argmax(p, q);
          T& target = dense ? grad_in.data[index] : grad_in(index / W, index % W);
          target += grad_out(p, q);
        }
      }
    });
  });
}

void avg_pool2d_forward(const Strided& y, const Strided& x, const kernel::Pool2dParams& params) {
  visit_float(x.dtype, [&]<class T>() {
    const int64_t H = x.sizes[2], W = x.sizes[3];
    for_each_plane(y, [&](int64_t n, int64_t c) {
      Plane<const T> in = plane<const T>(x, n, c);
      Plane<T> out = plane<T>(y, n, c);
      for_each_window(params, y.sizes[2], y.sizes[3], H, W,
                      [&](int64_t p, int64_t q, const Window& win) {
                        double divisor = static_cast<double>(win.divisor(params.count_include_pad));
                        out(p, q) = static_cast<T>(window_sum(in, win) / divisor);
                      });
    });
  });
}

void avg_pool2d_backward(const Strided& dx, const Strided& dy, const kernel::Pool2dParams& params) {
  visit_float(dx.dtype, [&]<class T>() {
    const int64_t H = dx.sizes[2], W = dx.sizes[3];
    for_each_plane(dx, [&](int64_t n, int64_t c) {
      Plane<T> grad_in = plane<T>(dx, n, c);
      Plane<const T> grad_out = plane<const T>(dy, n, c);
      zero_plane(grad_in, H, W);
      for_each_window(params, dy.sizes[2], dy.sizes[3], H, W,
                      [&](int64_t p, int64_t q, const Window& win) {
                        T divisor = static_cast<T>(win.divisor(params.count_include_pad));
                        add_to_window(grad_in, win, grad_out(p, q) / divisor);
                      });
    });
  });
}

}  // namespace loom::cpu
