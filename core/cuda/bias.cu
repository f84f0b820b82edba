// File: core/cuda/bias.cu
// Per-channel bias add and bias gradient on dense NCHW or channels-last
// operands, seen as (outer, C, inner) in memory order. The generic broadcast
// kernels find each element's channel with integer divisions; here each thread
// of the bias add divides once for its first element and then carries (position
// in the plane, channel) forward by additions, so the kernel runs at memory speed.
//
// The gradient is channel_sums.cuh's deterministic split sum (no atomics), the
// one batch norm's statistics and gradients take too.
//
// N batch, C channels, inner = H * W (NCHW) or 1 (channels-last, (N, C)).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/cuda/bias_kernels.h"
#include "core/cuda/channel_sums.cuh"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"

namespace loom::cuda {

std::optional<ChannelLayout> channel_layout(const Strided& t) {
  const size_t rank = t.sizes.size();
  if (rank < 2) return std::nullopt;
  int64_t spatial = 1;
  for (size_t d = 2; d < rank; ++d) spatial *= t.sizes[d];
  const ChannelLayout row_major{t.sizes[1], spatial}, channels_last{t.sizes[1], 1};
  if (t.numel() == 0) return row_major;  // nothing is read or written
  // Dense in `order` (innermost dim first): each stride is the product of the
  // sizes inside it.
  auto dense_in = [&](const std::vector<size_t>& order) {
    int64_t expected = 1;
    for (size_t d : order) {
      if (t.sizes[d] != 1 && t.strides[d] != expected) return false;
      expected *= t.sizes[d];
    }
    return true;
  };
  std::vector<size_t> rows, last{1};
  for (size_t d = rank; d-- > 0;) rows.push_back(d);
  for (size_t d = rank; d-- > 2;) last.push_back(d);
  last.push_back(0);
  if (dense_in(rows)) return row_major;
  if (dense_in(last)) return channels_last;
  return std::nullopt;
}

namespace {

// ---- channel cursor ------------------------------------------------------------

// A move of n elements in memory order: n % inner, (n / inner) % C.
struct ChannelStep {
  int64_t r, c;
};

ChannelStep step_of(int64_t n, const ChannelLayout& l) {
  return {n % l.inner, (n / l.inner) % l.channels};
}

// a / b for a >= 0, b > 0, in 32 bits where both fit (several times cheaper).
__device__ inline int64_t quotient(int64_t a, int64_t b) {
  if (a <= UINT32_MAX && b <= UINT32_MAX) {
    return static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
  }
  return a / b;
}

// Element i's place: r = i % inner, c = (i / inner) % C.
struct ChannelCursor {
  int64_t r, c;
};

__device__ inline ChannelCursor cursor_at(int64_t i, const ChannelLayout& l) {
  const int64_t q = quotient(i, l.inner);
  return {i - q * l.inner, q - quotient(q, l.channels) * l.channels};
}

// r + step.r < 2 * inner and c + step.c + carry < 2 * C, so one subtraction
// each brings them back in range.
__device__ inline void advance(ChannelCursor& at, const ChannelStep& step, const ChannelLayout& l) {
  at.r += step.r;
  const int64_t carry = at.r >= l.inner ? 1 : 0;
  at.r -= carry * l.inner;
  at.c += step.c + carry;
  if (at.c >= l.channels) at.c -= l.channels;
}

// ---- bias add --------------------------------------------------------------------

constexpr int64_t kBiasBlocks = 1024;  // about one wave of 256-thread blocks on an H100

template <class S, class B>
__device__ inline S add_bias(S value, const B* bias, int64_t bias_stride, int64_t c) {
  using T = compute_t<S>;
  return from_compute<S>(to_compute(value) + static_cast<T>(to_compute(bias[c * bias_stride])));
}

// Thread p handles pack p (elements p*V .. p*V+V-1) and every index_step()-th
// after it; `stride` is that step in elements, `one` a step of one element.
template <class S, class B, int V>
__global__ void add_channel_bias_kernel(S* y, const B* bias, int64_t bias_stride, int64_t n,
                                        ChannelLayout layout, ChannelStep one, ChannelStep stride) {
  const int64_t packs = (n + V - 1) / V;
  int64_t p = first_index();
  if (p >= packs) return;
  ChannelCursor at = cursor_at(p * V, layout);
  for (; p < packs; p += index_step(), advance(at, stride, layout)) {
    ChannelCursor lane = at;
    const int64_t begin = p * V;
    if (begin + V <= n) {
      Pack<S, V> pack = load_pack<V>(y + begin);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        pack.v[k] = add_bias(pack.v[k], bias, bias_stride, lane.c);
        advance(lane, one, layout);
      }
      store_pack(y + begin, pack);
    } else {
      for (int64_t i = begin; i < n; ++i) {
        y[i] = add_bias(y[i], bias, bias_stride, lane.c);
        advance(lane, one, layout);
      }
    }
  }
}

template <class S, class B, int V>
void launch_bias_packs(const Strided& y, const Strided& bias, const ChannelLayout& layout,
                       cudaStream_t stream) {
  const int64_t n = y.numel(), packs = (n + V - 1) / V;
  const int blocks =
      static_cast<int>(std::min((packs + kThreads - 1) / kThreads, kBiasBlocks));
  const int64_t stride = int64_t(blocks) * kThreads * V;
  add_channel_bias_kernel<S, B, V><<<blocks, kThreads, 0, stream>>>(
      y.ptr<S>(), bias.ptr<const B>(), bias.strides[0], n, layout, step_of(1, layout),
      step_of(stride, layout));
}

// 16-byte packs when y's data is 16-byte aligned (a view may start anywhere).
template <class S, class B>
void launch_bias(const Strided& y, const Strided& bias, const ChannelLayout& layout,
                 cudaStream_t stream) {
  constexpr int kPack = kPackOf<S>;
  if (reinterpret_cast<uintptr_t>(y.data) % 16 == 0) {
    launch_bias_packs<S, B, kPack>(y, bias, layout, stream);
  } else {
    launch_bias_packs<S, B, 1>(y, bias, layout, stream);
  }
}

// ---- channel sum (channel_sums.cuh), in compute_t<S> --------------------------------

// Element j of channel c of dy, or (relu_grad_sum) dy where the ReLU output y > 0,
// else 0, which is also stored to g: each element is visited once, so g is
// written once.
template <class S>
struct BiasGradTerm {
  ChannelViews<const S> dy, y;  // y.base null: plain dy
  ChannelViews<S> g;

  __device__ compute_t<S> operator()(int64_t c, int64_t j) const {
    compute_t<S> value = dy.at(c, j);
    if (y.base != nullptr) {
      if (!(y.at(c, j) > compute_t<S>(0))) value = compute_t<S>(0);
      g.ref(c, j) = from_compute<S>(value);
    }
    return value;
  }
};

struct AddSums {
  template <class Acc>
  __device__ Acc operator()(Acc a, Acc b) const {
    return a + b;
  }
};

template <class D>
struct StoreBiasGrad {
  D* db;
  int64_t stride;

  template <class Acc>
  __device__ void operator()(int64_t c, Acc sum) const {
    db[c * stride] = from_compute<D>(static_cast<compute_t<D>>(sum));
  }
};

template <class T>
ChannelViews<T> views_or_none(const Strided* t) {
  return t != nullptr ? channel_views<T>(*t) : ChannelViews<T>{};
}

}  // namespace

cudaError_t launch_add_channel_bias(const Strided& y, const Strided& bias, cudaStream_t stream) {
  if (y.numel() == 0) return cudaSuccess;
  const ChannelLayout layout = *channel_layout(y);
  visit_floating(y.dtype, [&]<class S>() {
    if (bias.dtype == DType::Float32) {
      launch_bias<S, float>(y, bias, layout, stream);
    } else {
      launch_bias<S, S>(y, bias, layout, stream);
    }
  });
  return cudaGetLastError();
}

size_t channel_sum_scratch_bytes(const Strided& dy) {
  return static_cast<size_t>(channel_split(dy).partials()) * (dy.dtype == DType::Float64 ? 8u : 4u);
}

namespace {

// y and g null: db from dy; else also g = relu_grad(dy, y).
cudaError_t launch_sum_of(const Strided& db, const Strided& dy, const Strided* y, const Strided* g,
                          void* scratch, cudaStream_t stream) {
  const ChannelSplit split = channel_split(dy);
  if (split.groups == 0) return cudaSuccess;  // no channels
  visit_floating(dy.dtype, [&]<class S>() {
    using Acc = compute_t<S>;
    const BiasGradTerm<S> term{channel_views<const S>(dy), views_or_none<const S>(y), views_or_none<S>(g)};
    Acc* partial = static_cast<Acc*>(scratch);
    if (db.dtype == DType::Float32) {
      sum_channels(split, term, AddSums{}, StoreBiasGrad<float>{db.ptr<float>(), db.strides[0]}, partial, stream);
    } else {
      sum_channels(split, term, AddSums{}, StoreBiasGrad<S>{db.ptr<S>(), db.strides[0]}, partial, stream);
    }
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_channel_sum(const Strided& db, const Strided& dy, void* scratch,
                               cudaStream_t stream) {
  return launch_sum_of(db, dy, nullptr, nullptr, scratch, stream);
}

cudaError_t launch_relu_grad_sum(const Strided& g, const Strided& db, const Strided& dy,
                                 const Strided& y, void* scratch, cudaStream_t stream) {
  return launch_sum_of(db, dy, &y, &g, scratch, stream);
}

}  // namespace loom::cuda
