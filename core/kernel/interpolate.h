// File: core/kernel/interpolate.h
// The interpolation modes and spec; which input pixels one output pixel of interpolate reads and with what
// weights, and the reverse (which outputs one input pixel's gradient gathers),
// written once for core/cpu/interpolate.cc and core/cuda/interpolate.cu (nvcc
// sees __host__ __device__). The formulas are PyTorch's (ATen's
// UpSample.h), in its precision:
//
//   nearest:  src = min(floor(o * s), in - 1) in float32, with s = 1 / scale
//             when a scale factor was given, else in / out (o itself when
//             out == in, o / 2 when out == 2 in);
//   bilinear: src = s * o with align_corners (s = (in - 1) / (out - 1)), else
//             max(s * (o + 0.5) - 0.5, 0) with s as for nearest; it reads i0 =
//             floor(src) and i1 = min(i0 + 1, in - 1) with weights 1 - l and
//             l = src - i0, computed in T (float32 for float32 and 16-bit
//             tensors, float64 for float64).
//
// Products are rounded on their own (no fused multiply-add), so the CPU and
// the GPU pick the same pixels and weights.
//
// in, out: an axis' extent in the input and the output; o an output index.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/kernel/host_device.h"

namespace loom::kernel {

enum class InterpolateMode : uint8_t { Nearest, Bilinear };

struct InterpolateSpec {
  InterpolateMode mode = InterpolateMode::Nearest;
  bool align_corners = false;  // bilinear: corner pixels' centres align
  // The user's scale factors when the output size came from them (PyTorch then
  // maps indices with 1 / scale, not H / P); 0: none given, H / P and W / Q.
  double scale_h = 0.0, scale_w = 0.0;
};

}  // namespace loom::kernel

namespace loom::kernel::math {

// a * b rounded once, never contracted into an FMA with a later add.
template <class T>
LOOM_HOST_DEVICE T mul_rn(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) {
    return __fmul_rn(a, b);
  } else {
    return __dmul_rn(a, b);
  }
#else
  return a * b;
#endif
}

struct NearestAxis {
  int64_t in = 1, out = 1;
  float scale = 1.0f;
};

// `scale_factor` is the user's (or 0: none).
inline NearestAxis nearest_axis(int64_t in, int64_t out, double scale_factor) {
  const float s = scale_factor > 0 ? static_cast<float>(1.0 / scale_factor)
                                   : static_cast<float>(in) / static_cast<float>(out);
  return {in, out, s};
}

LOOM_HOST_DEVICE inline int64_t nearest_source(const NearestAxis& a, int64_t o) {
  if (a.out == a.in) return o;
  if (a.out == 2 * a.in) return o >> 1;
  const int64_t s = static_cast<int64_t>(std::floor(mul_rn(static_cast<float>(o), a.scale)));
  return s < a.in - 1 ? s : a.in - 1;
}

template <class T>
struct LinearAxis {
  int64_t in = 1, out = 1;
  T scale = T(1);
  bool align_corners = false;
};

template <class T>
LinearAxis<T> linear_axis(int64_t in, int64_t out, bool align_corners, double scale_factor) {
  T s;
  if (align_corners) {
    s = out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  } else {
    s = scale_factor > 0 ? static_cast<T>(1.0 / scale_factor)
                         : static_cast<T>(in) / static_cast<T>(out);
  }
  return {in, out, s, align_corners};
}

// The two input indices output index o reads and their weights.
template <class T>
struct LinearTap {
  int64_t i0, i1;
  T w0, w1;
};

template <class T>
LOOM_HOST_DEVICE LinearTap<T> linear_tap(const LinearAxis<T>& a, int64_t o) {
  T src;
  if (a.align_corners) {
    src = mul_rn(a.scale, static_cast<T>(o));
  } else {
    src = mul_rn(a.scale, static_cast<T>(o) + T(0.5)) - T(0.5);
    if (src < T(0)) src = T(0);
  }
  const int64_t i0 = static_cast<int64_t>(src);
  const T w1 = src - static_cast<T>(i0);
  return {i0, i0 < a.in - 1 ? i0 + 1 : i0, T(1) - w1, w1};
}

// The first output index in [0, out) whose key is >= target, or out; key is
// non-decreasing in the output index (both axes' source indices are).
template <class Key>
LOOM_HOST_DEVICE int64_t first_at_least(int64_t out, int64_t target, const Key& key) {
  int64_t lo = 0, hi = out;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (key(mid) >= target) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Both axes of one resampling, and the layout the kernel walks in: the
// tensor it writes (y forward, dx backward) is channels-last or not.
template <class T>
struct InterpolatePlan {
  InterpolateMode mode = InterpolateMode::Nearest;
  NearestAxis nearest_h, nearest_w;
  LinearAxis<T> linear_h, linear_w;
  bool channels_last = false;
};

template <class T>
InterpolatePlan<T> interpolate_plan(const InterpolateSpec& spec, int64_t H, int64_t W, int64_t P,
                                    int64_t Q, bool channels_last) {
  InterpolatePlan<T> plan;
  plan.mode = spec.mode;
  plan.nearest_h = nearest_axis(H, P, spec.scale_h);
  plan.nearest_w = nearest_axis(W, Q, spec.scale_w);
  plan.linear_h = linear_axis<T>(H, P, spec.align_corners, spec.scale_h);
  plan.linear_w = linear_axis<T>(W, Q, spec.align_corners, spec.scale_w);
  plan.channels_last = channels_last;
  return plan;
}

// (n, c, row, col) of element `linear` of an (N, C, rows, cols) tensor walked
// in its memory order: NCHW (col fastest) or NHWC (channel fastest).
struct Pixel {
  int64_t n, c, row, col;
};

LOOM_HOST_DEVICE inline Pixel pixel_at(int64_t linear, int64_t C, int64_t rows, int64_t cols,
                                       bool channels_last) {
  Pixel p;
  if (channels_last) {
    p.c = linear % C;
    linear /= C;
    p.col = linear % cols;
    linear /= cols;
    p.row = linear % rows;
    p.n = linear / rows;
  } else {
    p.col = linear % cols;
    linear /= cols;
    p.row = linear % rows;
    linear /= rows;
    p.c = linear % C;
    p.n = linear / C;
  }
  return p;
}

// Output pixel (oh, ow) of one (n, c) plane; load(offset) reads x at an
// offset within the plane (sh, sw: x's row and column strides).
template <class T, class Load>
LOOM_HOST_DEVICE T interpolate_value(const InterpolatePlan<T>& plan, int64_t oh, int64_t ow,
                                     int64_t sh, int64_t sw, const Load& load) {
  if (plan.mode == InterpolateMode::Nearest) {
    return load(nearest_source(plan.nearest_h, oh) * sh + nearest_source(plan.nearest_w, ow) * sw);
  }
  const LinearTap<T> th = linear_tap(plan.linear_h, oh), tw = linear_tap(plan.linear_w, ow);
  const T top = tw.w0 * load(th.i0 * sh + tw.i0 * sw) + tw.w1 * load(th.i0 * sh + tw.i1 * sw);
  const T bottom = tw.w0 * load(th.i1 * sh + tw.i0 * sw) + tw.w1 * load(th.i1 * sh + tw.i1 * sw);
  return th.w0 * top + th.w1 * bottom;
}

// The output indices whose gradient reaches input index i along one axis:
// [begin, end). Nearest: those reading i. Bilinear: those whose i0 is i - 1
// or i (their weight for i is weight_for below, possibly 0).
struct OutputRange {
  int64_t begin, end;
};

LOOM_HOST_DEVICE inline OutputRange nearest_range(const NearestAxis& a, int64_t i) {
  auto source = [&a](int64_t o) { return nearest_source(a, o); };
  return {first_at_least(a.out, i, source), first_at_least(a.out, i + 1, source)};
}

template <class T>
LOOM_HOST_DEVICE OutputRange linear_range(const LinearAxis<T>& a, int64_t i) {
  auto first = [&a](int64_t o) { return linear_tap(a, o).i0; };
  return {first_at_least(a.out, i - 1, first), first_at_least(a.out, i + 1, first)};
}

// The weight output index o gives input index i (both taps may be i at the edge).
template <class T>
LOOM_HOST_DEVICE T weight_for(const LinearAxis<T>& a, int64_t o, int64_t i) {
  const LinearTap<T> t = linear_tap(a, o);
  return (t.i0 == i ? t.w0 : T(0)) + (t.i1 == i ? t.w1 : T(0));
}

// dx at input pixel (ih, iw) of one (n, c) plane: load(offset) reads dy at an
// offset within the plane (sh, sw: dy's row and column strides). Rows outer,
// columns inner, in increasing order.
template <class T, class Load>
LOOM_HOST_DEVICE T interpolate_grad(const InterpolatePlan<T>& plan, int64_t ih, int64_t iw,
                                    int64_t sh, int64_t sw, const Load& load) {
  T sum = T(0);
  if (plan.mode == InterpolateMode::Nearest) {
    const OutputRange rows = nearest_range(plan.nearest_h, ih);
    const OutputRange cols = nearest_range(plan.nearest_w, iw);
    for (int64_t oh = rows.begin; oh < rows.end; ++oh) {
      for (int64_t ow = cols.begin; ow < cols.end; ++ow) sum += load(oh * sh + ow * sw);
    }
    return sum;
  }
  const OutputRange rows = linear_range(plan.linear_h, ih);
  const OutputRange cols = linear_range(plan.linear_w, iw);
  for (int64_t oh = rows.begin; oh < rows.end; ++oh) {
    const T wh = weight_for(plan.linear_h, oh, ih);
    T row = T(0);
    for (int64_t ow = cols.begin; ow < cols.end; ++ow) {
      row += weight_for(plan.linear_w, ow, iw) * load(oh * sh + ow * sw);
    }
    sum += wh * row;
  }
  return sum;
}

}  // namespace loom::kernel::math
