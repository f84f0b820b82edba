// File: core/cuda/bias.cu
// Per-channel bias add and bias gradient on dense NCHW or channels-last
// operands, seen as (outer, C, inner) in memory order. The generic broadcast
// kernels find each element's channel with integer divisions; here each thread
// divides once for its first element and then carries (position in the plane,
// channel) forward by additions, so the kernels run at memory speed.
//
// The sum is deterministic: blocks write per-group partial sums to a scratch
// buffer in a shape-fixed layout and a second kernel adds each channel's
// partials in a fixed tree order. No atomics.
//
// N batch, C channels, inner = H * W (NCHW) or 1 (channels-last, (N, C)).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/cuda/bias_kernels.h"
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

// ---- channel sum -------------------------------------------------------------------

constexpr int64_t kSumBlocks = 1024;      // first-pass blocks aimed for
constexpr int64_t kMinPerThread = 16;     // elements a first-pass thread sums at least
constexpr int64_t kMaxGroups = 1024;      // partials per channel at most
constexpr int kTileColumns = 32, kTileRows = kThreads / kTileColumns;

// How the first pass splits dy; a function of the shape only, so a given shape
// always sums in the same order. groups = 0 for an empty dy.
struct SumPlan {
  ChannelLayout layout;
  int64_t per_channel;  // elements summed into each db[c]
  int64_t groups;       // partial sums per channel
  size_t acc_bytes;
};

SumPlan plan_of(const Strided& dy) {
  SumPlan plan{*channel_layout(dy), 0, 0, dy.dtype == DType::Float64 ? 8u : 4u};
  const int64_t channels = plan.layout.channels;
  if (dy.numel() == 0) return plan;
  plan.per_channel = dy.numel() / channels;
  // Channels-last: column tiles of 32 channels; NCHW: one block per channel.
  const int64_t per_group = plan.layout.inner == 1 ? kTileRows : kThreads;
  const int64_t blocks_per_group = plan.layout.inner == 1 ? ceil_div(channels, kTileColumns)
                                                          : channels;
  plan.groups = std::clamp(std::min(ceil_div(kSumBlocks, blocks_per_group),
                                    ceil_div(plan.per_channel, per_group * kMinPerThread)),
                           int64_t{1}, kMaxGroups);
  return plan;
}

// Where a first pass puts group g's sum of channel c: partial[g][c], or, when
// there is one group (db not null), straight into db[c], so that no second
// pass runs.
template <class D, class Acc>
struct SumOut {
  Acc* partial;
  D* db;
  int64_t db_stride;

  __device__ void put(int64_t g, int64_t c, int64_t channels, Acc sum) const {
    if (db != nullptr) {
      db[c * db_stride] = from_compute<D>(static_cast<compute_t<D>>(sum));
    } else {
      partial[g * channels + c] = sum;
    }
  }
};

// What the sums read at element i of dy's memory: dy itself, or (relu_grad_sum)
// dy where the ReLU output y > 0, else 0, which is also stored to g[i]: each
// element is read by exactly one thread, so g is written once.
template <class S>
struct SumSource {
  const S* dy;
  const S* y;  // null: plain dy
  S* g;

  __device__ compute_t<S> operator()(int64_t i) const {
    compute_t<S> value = to_compute(dy[i]);
    if (y != nullptr) {
      if (!(to_compute(y[i]) > compute_t<S>(0))) value = compute_t<S>(0);
      g[i] = from_compute<S>(value);
    }
    return value;
  }
};

// dy (rows, C) row-major. Block (x, g) sums columns c = x*32 + tx over rows
// g*8 + ty, stepping groups*8, then adds its 8 row-partials as a tree.
template <class S, class D, class Acc>
__global__ void column_partials_kernel(SumSource<S> dy, int64_t rows, int64_t channels,
                                       int64_t groups, SumOut<D, Acc> out) {
  __shared__ Acc tile[kTileRows][kTileColumns + 1];
  const int64_t c = blockIdx.x * int64_t(kTileColumns) + threadIdx.x;
  Acc acc = 0;
  if (c < channels) {
    for (int64_t r = blockIdx.y * int64_t(kTileRows) + threadIdx.y; r < rows;
         r += groups * kTileRows) {
      acc += dy(r * channels + c);
    }
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  for (int half = kTileRows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) tile[threadIdx.y][threadIdx.x] += tile[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < channels) out.put(blockIdx.y, c, channels, tile[0][threadIdx.x]);
}

// dy (outer, C, inner) row-major. Channel c's k-th element (k = n * inner + j)
// sits at n * C * inner + c * inner + j. Block (c, g) sums k in
// [g * chunk, (g + 1) * chunk).
template <class S, class D, class Acc>
__global__ void plane_partials_kernel(SumSource<S> dy, ChannelLayout l, int64_t per_channel,
                                      int64_t chunk, SumOut<D, Acc> out) {
  const int64_t c = blockIdx.x, g = blockIdx.y;
  const int64_t end = (g + 1) * chunk < per_channel ? (g + 1) * chunk : per_channel;
  const int64_t plane = l.channels * l.inner;
  const int64_t jump_n = kThreads / l.inner, jump_j = kThreads % l.inner;
  Acc acc = 0;
  int64_t k = g * chunk + threadIdx.x;
  if (k < end) {
    int64_t n = quotient(k, l.inner), j = k - n * l.inner;
    const int64_t channel = c * l.inner;
    for (; k < end; k += kThreads) {
      acc += dy(channel + n * plane + j);
      j += jump_j;
      n += jump_n;
      if (j >= l.inner) {
        j -= l.inner;
        ++n;
      }
    }
  }
  acc = block_reduce(acc, [](Acc a, Acc b) { return a + b; });
  if (threadIdx.x == 0) out.put(g, c, l.channels, acc);
}

// db[c] = the sum of partial[g][c] over g, one block per channel, in a fixed
// order (each thread every 256th group, then a tree).
template <class D, class Acc>
__global__ void finish_sum_kernel(D* db, int64_t db_stride, const Acc* partial, int64_t groups,
                                  int64_t channels) {
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    Acc acc = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) acc += partial[g * channels + c];
    acc = block_reduce(acc, [](Acc a, Acc b) { return a + b; });
    if (threadIdx.x == 0) db[c * db_stride] = from_compute<D>(static_cast<compute_t<D>>(acc));
  }
}

template <class S, class D>
void launch_sum(const Strided& db, const SumSource<S>& dy, const SumPlan& plan, void* scratch,
                cudaStream_t stream) {
  using Acc = compute_t<S>;
  Acc* partial = static_cast<Acc*>(scratch);
  const ChannelLayout& l = plan.layout;
  const bool one_pass = plan.groups == 1;
  const SumOut<D, Acc> out{partial, one_pass ? db.ptr<D>() : nullptr, db.strides[0]};
  if (plan.groups > 0 && l.inner == 1) {
    const dim3 grid(static_cast<unsigned>(ceil_div(l.channels, kTileColumns)),
                    static_cast<unsigned>(plan.groups));
    column_partials_kernel<<<grid, dim3(kTileColumns, kTileRows), 0, stream>>>(
        dy, plan.per_channel, l.channels, plan.groups, out);
  } else if (plan.groups > 0) {
    const dim3 grid(static_cast<unsigned>(l.channels), static_cast<unsigned>(plan.groups));
    plane_partials_kernel<<<grid, kThreads, 0, stream>>>(
        dy, l, plan.per_channel, ceil_div(plan.per_channel, plan.groups), out);
  }
  if (one_pass) return;
  finish_sum_kernel<<<blocks_for_groups(l.channels), kThreads, 0, stream>>>(
      db.ptr<D>(), db.strides[0], partial, plan.groups, l.channels);
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
  const SumPlan plan = plan_of(dy);
  return static_cast<size_t>(plan.groups * plan.layout.channels) * plan.acc_bytes;
}

namespace {

// y and g null: db from dy; else also g = relu_grad(dy, y).
cudaError_t launch_sum_of(const Strided& db, const Strided& dy, const Strided* y, const Strided* g,
                          void* scratch, cudaStream_t stream) {
  const SumPlan plan = plan_of(dy);
  if (plan.layout.channels == 0) return cudaSuccess;
  visit_floating(dy.dtype, [&]<class S>() {
    const SumSource<S> source{dy.ptr<const S>(), y ? y->ptr<const S>() : nullptr,
                              g ? g->ptr<S>() : nullptr};
    if (db.dtype == DType::Float32) {
      launch_sum<S, float>(db, source, plan, scratch, stream);
    } else {
      launch_sum<S, S>(db, source, plan, scratch, stream);
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
