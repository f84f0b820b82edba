// File: core/cuda/pool_window.cu
// Window-index max pooling (pool_window.h): a thread per output (forward) or per
// input element (backward), each handling V channels at once. V is 16 bytes of
// the storage type when the input side (x or dx) and the index are channels-last
// with whole vectors of channels and aligned pointers, else 1 (any strides). The
// output side (y or dy) moves as whole packs when it is laid out alike, else one
// channel at a time: a channels-last input can pool into an NCHW output, which a
// flatten then views without a copy. bfloat16 and float16 are
// compared and summed in float32 and rounded once on store (element.cuh).
// N batch, C channels, H, W input plane, P, Q output plane.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/pool_window_kernels.h"
#include "core/cuda/view4.cuh"

namespace loom::cuda {

namespace {

// Plane coordinates and channels fit 32 bits; the batch index gets 64.
struct Position {
  int64_t n;
  int c, h, w;
};

// The packs of the operand a kernel writes, a thread each: (N, rows, cols, C / V)
// row-major when channels vary fastest in memory (always so when V > 1), else
// (N, C, rows, cols), so that neighbouring threads touch neighbouring addresses.
// Thread indices below 2^32 (narrow) are split with 32-bit divisions, which
// cost a fraction of 64-bit ones.
struct PackSpace {
  int64_t count;
  int packs, C, rows, cols;  // packs = C / V
  int V;
  bool channels_inner, narrow;

  template <class I>
  __device__ Position split(I i) const {
    Position pos;
    if (channels_inner) {
      pos.c = static_cast<int>(i % packs) * V;
      i /= packs;
      pos.w = static_cast<int>(i % cols);
      i /= cols;
      pos.h = static_cast<int>(i % rows);
      pos.n = static_cast<int64_t>(i / rows);
    } else {
      pos.w = static_cast<int>(i % cols);
      i /= cols;
      pos.h = static_cast<int>(i % rows);
      i /= rows;
      pos.c = static_cast<int>(i % C);
      pos.n = static_cast<int64_t>(i / C);
    }
    return pos;
  }

  __device__ Position at(int64_t i) const {
    return narrow ? split(static_cast<uint32_t>(i)) : split(i);
  }
};

PackSpace pack_space(const Strided& t, int V) {
  const int64_t packs = t.sizes[1] / V;
  const int64_t count = t.sizes[0] * packs * t.sizes[2] * t.sizes[3];
  return {count,
          static_cast<int>(packs),
          static_cast<int>(t.sizes[1]),
          static_cast<int>(t.sizes[2]),
          static_cast<int>(t.sizes[3]),
          V,
          V > 1 || t.strides[1] < t.strides[3],
          count <= int64_t(UINT32_MAX)};
}

// The window geometry and both planes, in 32 bits.
struct Shape2 {
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  int H, W, P, Q;
};

// The outputs [first, last) along one dim whose windows hold input i: those with
// o * stride - pad <= i < o * stride - pad + kernel, inside [0, out).
struct Span {
  int first, last;
};

__device__ Span covering(int i, int kernel, int stride, int pad, int out) {
  const int shifted = i + pad;  // >= 0
  const int first = shifted < kernel ? 0 : (shifted - kernel) / stride + 1;
  return {first, min(shifted / stride + 1, out)};
}

// V consecutive channels from c on at (n, h, w): one pack where the operand
// holds them side by side (packed), else one element each.
template <int V, class S>
__device__ Pack<std::remove_const_t<S>, V> gather_pack(const View4<S>& t, bool packed, int64_t n, int c,
                                                       int h, int w) {
  if (V == 1 || packed) return load_pack<V>(t.at(n, c, h, w));
  Pack<std::remove_const_t<S>, V> out;
#pragma unroll
  for (int j = 0; j < V; ++j) out.v[j] = *t.at(n, c + j, h, w);
  return out;
}

template <int V, class S>
__device__ void scatter_pack(const View4<S>& t, bool packed, int64_t n, int c, int h, int w,
                             const Pack<S, V>& value) {
  if (V == 1 || packed) {
    store_pack(t.at(n, c, h, w), value);
    return;
  }
#pragma unroll
  for (int j = 0; j < V; ++j) *t.at(n, c + j, h, w) = value.v[j];
}

template <class S, int V>
__global__ void window_forward_kernel(View4<S> y, View4<uint8_t> index, View4<const S> x,
                                      PackSpace outputs, Shape2 s, bool y_packed) {
  using T = compute_t<S>;
  for (int64_t i = first_index(); i < outputs.count; i += index_step()) {
    const Position o = outputs.at(i);
    const int h_origin = o.h * s.stride_h - s.pad_h, w_origin = o.w * s.stride_w - s.pad_w;
    const int h0 = max(h_origin, 0), w0 = max(w_origin, 0);
    const int h1 = min(h_origin + s.kernel_h, s.H), w1 = min(w_origin + s.kernel_w, s.W);
    T best[V];
    Pack<uint8_t, V> arg;
    const uint8_t first = static_cast<uint8_t>((h0 - h_origin) * s.kernel_w + (w0 - w_origin));
#pragma unroll
    for (int j = 0; j < V; ++j) {
      best[j] = -std::numeric_limits<T>::infinity();
      arg.v[j] = first;
    }
    for (int h = h0; h < h1; ++h) {
      for (int w = w0; w < w1; ++w) {
        const Pack<S, V> v = load_pack<V>(x.at(o.n, o.c, h, w));
        const uint8_t local = static_cast<uint8_t>((h - h_origin) * s.kernel_w + (w - w_origin));
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const T t = to_compute(v.v[j]);
          if (t > best[j] || isnan(t)) {
            best[j] = t;
            arg.v[j] = local;
          }
        }
      }
    }
    Pack<S, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_compute<S>(best[j]);
    scatter_pack<V>(y, y_packed, o.n, o.c, o.h, o.w, out);
    store_pack(index.at(o.n, o.c, o.h, o.w), arg);
  }
}

// The gradient the backward reads: dy, or dy + addend where autograd passes
// two gradients of the pooled output (core/autograd.h, BackwardSumFn). Each
// element's sum is rounded to S before use, as the separate sum it replaces
// would store it, so the fold changes no bit of dx.
template <class S>
struct PooledGradient {
  View4<const S> dy, addend;  // addend.data null: one gradient
  bool dy_packed, addend_packed;

  template <int V>
  __device__ Pack<S, V> load(int64_t n, int c, int h, int w) const {
    Pack<S, V> g = gather_pack<V>(dy, dy_packed, n, c, h, w);
    if (addend.data == nullptr) return g;
    const Pack<S, V> a = gather_pack<V>(addend, addend_packed, n, c, h, w);
#pragma unroll
    for (int j = 0; j < V; ++j) g.v[j] = from_compute<S>(to_compute(g.v[j]) + to_compute(a.v[j]));
    return g;
  }
};

// Non-overlapping windows cover an element at most once, so the loops run once
// or not at all (an element no window holds gets zero).
template <class S, int V>
__global__ void window_backward_kernel(View4<S> dx, PooledGradient<S> dy, View4<const uint8_t> index,
                                       PackSpace inputs, Shape2 s) {
  using T = compute_t<S>;
  for (int64_t i = first_index(); i < inputs.count; i += index_step()) {
    const Position e = inputs.at(i);
    const Span rows = covering(e.h, s.kernel_h, s.stride_h, s.pad_h, s.P);
    const Span cols = covering(e.w, s.kernel_w, s.stride_w, s.pad_w, s.Q);
    T sum[V];
#pragma unroll
    for (int j = 0; j < V; ++j) sum[j] = T(0);
    for (int p = rows.first; p < rows.last; ++p) {
      const int row_local = (e.h - (p * s.stride_h - s.pad_h)) * s.kernel_w;
      for (int q = cols.first; q < cols.last; ++q) {
        const int local = row_local + e.w - (q * s.stride_w - s.pad_w);
        const Pack<uint8_t, V> picked = load_pack<V>(index.at(e.n, e.c, p, q));
        const Pack<S, V> g = dy.template load<V>(e.n, e.c, p, q);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if (picked.v[j] == local) sum[j] += to_compute(g.v[j]);
        }
      }
    }
    Pack<S, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_compute<S>(sum[j]);
    store_pack(dx.at(e.n, e.c, e.h, e.w), out);
  }
}

// Windows that tile the input exactly (kernel = stride, no padding, every input
// element in one window): a thread per output pack reads its index and gradient
// once and writes the whole window, the picked element getting the gradient and
// the others zero. A thread per input element, as above, does the index
// arithmetic four times as often for a 2x2 window: on an H100 it ran resnet9's
// first bf16 max-pool backward (512, 128, 32, 32) at 27% of DRAM bandwidth
// (179 us), against 76% for the forward.
template <class S, int V>
__global__ void tiled_backward_kernel(View4<S> dx, PooledGradient<S> dy, View4<const uint8_t> index,
                                      PackSpace outputs, Shape2 s) {
  using T = compute_t<S>;
  for (int64_t i = first_index(); i < outputs.count; i += index_step()) {
    const Position o = outputs.at(i);
    const Pack<uint8_t, V> picked = load_pack<V>(index.at(o.n, o.c, o.h, o.w));
    const Pack<S, V> g = dy.template load<V>(o.n, o.c, o.h, o.w);
    for (int kh = 0; kh < s.kernel_h; ++kh) {
      for (int kw = 0; kw < s.kernel_w; ++kw) {
        const int local = kh * s.kernel_w + kw;
        Pack<S, V> out;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          // T(0) + g, as the per-element sum: a -0 gradient stores +0 both ways.
          out.v[j] = from_compute<S>(picked.v[j] == local ? T(0) + to_compute(g.v[j]) : T(0));
        }
        store_pack(dx.at(o.n, o.c, o.h * s.stride_h + kh, o.w * s.stride_w + kw), out);
      }
    }
  }
}

bool tiles_exactly(const Shape2& s) {
  return s.stride_h == s.kernel_h && s.stride_w == s.kernel_w && s.pad_h == 0 && s.pad_w == 0 &&
         s.H == s.P * s.kernel_h && s.W == s.Q * s.kernel_w;
}

// The 16-byte pack width when the input side (x or dx) and the index take it,
// else 1. The output side takes whatever layout it has (packed_at).
template <class S>
int pack_width(const Strided& input, const Strided& index) {
  constexpr int kWide = kPackOf<S>;
  return channel_packs_fit(input, kWide) && channel_packs_fit(index, kWide) ? kWide : 1;
}

// Whether the output side moves as whole packs of V channels.
bool packed_at(const Strided& t, int V) { return V == 1 || channel_packs_fit(t, V); }

// fn.template operator()<V>() with V the 16-byte pack width of S or 1.
template <class S, class Fn>
void visit_width(int V, Fn&& fn) {
  if (V == kPackOf<S>) {
    fn.template operator()<kPackOf<S>>();
  } else {
    fn.template operator()<1>();
  }
}

Shape2 shape2(const kernel::Pool2dParams& k, const Strided& in, const Strided& out) {
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  return {i32(k.kernel_h), i32(k.kernel_w), i32(k.stride_h), i32(k.stride_w), i32(k.pad_h),
          i32(k.pad_w),    i32(in.sizes[2]), i32(in.sizes[3]), i32(out.sizes[2]), i32(out.sizes[3])};
}

}  // namespace

cudaError_t launch_max_pool2d_window_forward(const Strided& y, const Strided& index,
                                             const Strided& x, const kernel::Pool2dParams& params,
                                             cudaStream_t stream) {
  if (y.numel() == 0) return cudaSuccess;
  visit_floating(x.dtype, [&]<class S>() {
    visit_width<S>(pack_width<S>(x, index), [&]<int V>() {
      const PackSpace outputs = pack_space(index, V);
      window_forward_kernel<S, V><<<blocks_for(outputs.count), kThreads, 0, stream>>>(
          view4<S>(y), view4<uint8_t>(index), view4<const S>(x), outputs, shape2(params, x, y),
          packed_at(y, V));
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_max_pool2d_window_backward(const Strided& dx, const Strided& dy, const Strided* dy_addend,
                                              const Strided& index, const kernel::Pool2dParams& params,
                                              cudaStream_t stream) {
  if (dx.numel() == 0) return cudaSuccess;
  visit_floating(dx.dtype, [&]<class S>() {
    visit_width<S>(pack_width<S>(dx, index), [&]<int V>() {
      const Shape2 s = shape2(params, dx, dy);
      const auto dxv = view4<S>(dx);
      const auto iv = view4<const uint8_t>(index);
      const PooledGradient<S> gradient{view4<const S>(dy), dy_addend ? view4<const S>(*dy_addend) : View4<const S>{},
                                       packed_at(dy, V), dy_addend && packed_at(*dy_addend, V)};
      if (tiles_exactly(s)) {
        const PackSpace outputs = pack_space(index, V);
        tiled_backward_kernel<S, V><<<blocks_for(outputs.count), kThreads, 0, stream>>>(dxv, gradient, iv,
                                                                                         outputs, s);
      } else {
        const PackSpace inputs = pack_space(dx, V);
        window_backward_kernel<S, V><<<blocks_for(inputs.count), kThreads, 0, stream>>>(dxv, gradient, iv,
                                                                                         inputs, s);
      }
    });
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
