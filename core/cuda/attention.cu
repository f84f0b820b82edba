// File: core/cuda/attention.cu
// Attention for short sequences: one block per attention (b1, b2) copies its
// operands into shared memory in the compute type (rows padded by one element,
// core/kernel/attention.h), then computes the scores, the row softmax and the
// products there. Each output element is one thread's sum in a fixed order and
// each row's reductions one warp's, so runs give the same bits.
//
// L query rows, S key rows, E the query/key width, F the value width.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/cuda/attention_kernels.h"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/shared_memory.cuh"
#include "core/kernel/attention.h"

namespace loom::cuda {

namespace {

constexpr int kAttentionThreads = 128;

// One operand of the problem, (B1, B2, rows, width) with a unit stride on the width.
template <class T>
struct Operand {
  T* data;
  int64_t stride0, stride1, stride_row;
  __device__ T* row(int64_t b1, int64_t b2, int64_t r) const {
    return data + b1 * stride0 + b2 * stride1 + r * stride_row;
  }
};

template <class T>
Operand<T> operand(const Strided& t) {
  return {static_cast<T*>(t.data), t.strides[0], t.strides[1], t.strides[2]};
}

// The shared-memory block of one operand: rows x width, pitch width + 1.
template <class C>
struct Tile {
  C* data;
  int pitch;
  __device__ C& operator()(int r, int c) const { return data[r * pitch + c]; }
};

template <class C, class S>
__device__ void load_tile(const Tile<C>& to, const Operand<const S>& from, int64_t b1, int64_t b2, int rows,
                          int width) {
  for (int i = threadIdx.x; i < rows * width; i += blockDim.x) {
    const int r = i / width, c = i % width;
    to(r, c) = to_compute(from.row(b1, b2, r)[c]);
  }
}

// out(r, c, sum over t < T of a(r, t) * b(t, c)), one thread an element, t in order.
template <class C, class A, class B, class Out>
__device__ void product(int R, int cols, int T, A a, B b, Out out) {
  for (int idx = threadIdx.x; idx < R * cols; idx += blockDim.x) {
    const int r = idx / cols, c = idx % cols;
    C acc = 0;
    for (int t = 0; t < T; ++t) acc += a(r, t) * b(t, c);
    out(r, c, acc);
  }
}

template <class C>
__device__ C exp_of(C x) {
  if constexpr (std::is_same_v<C, double>) {
    return exp(x);
  } else {
    return expf(x);
  }
}

// p = softmax(scale * q k^T) by rows, one warp a row; causal: keys after the
// query's row score -inf (key 0 always stays, so no row is all -inf).
template <class C>
__device__ void probabilities(const Tile<C>& p, const Tile<C>& q, const Tile<C>& k, int L, int S, int E,
                              C scale, bool causal) {
  product<C>(L, S, E, [&](int i, int e) { return q(i, e); }, [&](int e, int j) { return k(j, e); },
             [&](int i, int j, C s) { p(i, j) = causal && j > i ? static_cast<C>(-INFINITY) : s * scale; });
  __syncthreads();
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  for (int i = threadIdx.x / kWarp; i < L; i += warps) {
    C m = p(i, 0);
    for (int j = lane; j < S; j += kWarp) m = fmax(m, p(i, j));
    m = warp_reduce(m, [](C a, C b) { return fmax(a, b); });
    C sum = 0;
    for (int j = lane; j < S; j += kWarp) {
      const C e = exp_of(p(i, j) - m);
      p(i, j) = e;
      sum += e;
    }
    sum = warp_sum(sum);
    for (int j = lane; j < S; j += kWarp) p(i, j) /= sum;
  }
  __syncthreads();
}

// Row by row, g (holding dL/dp) becomes dL/d(q k^T) = scale * p * (g - sum_j p g).
template <class C>
__device__ void score_grads(const Tile<C>& g, const Tile<C>& p, int L, int S, C scale) {
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  for (int i = threadIdx.x / kWarp; i < L; i += warps) {
    C dot = 0;
    for (int j = lane; j < S; j += kWarp) dot += p(i, j) * g(i, j);
    dot = warp_sum(dot);
    for (int j = lane; j < S; j += kWarp) g(i, j) = scale * p(i, j) * (g(i, j) - dot);
  }
  __syncthreads();
}

// The tiles of one block, carved from its dynamic shared memory where
// core/kernel/attention.h places them.
template <class C>
struct Tiles {
  Tile<C> q, k, v, p, dy, dp;
  __device__ Tiles(C* base, const kernel::AttentionTiles& at)
      : q(at_tile(base, at.q)), k(at_tile(base, at.k)), v(at_tile(base, at.v)), p(at_tile(base, at.p)),
        dy(at_tile(base, at.dy)), dp(at_tile(base, at.dp)) {}
  __device__ static Tile<C> at_tile(C* base, const kernel::AttentionTile& t) {
    return {base + t.offset, static_cast<int>(t.pitch)};
  }
};

// What both kernels start with: this block's attention (b1, b2) and its q, k and v
// loaded into the tiles.
template <class C, class S_>
struct BlockStart {
  Tiles<C> t;
  int64_t b1, b2;
  int L, S, E, F;
  __device__ BlockStart(const Operand<const S_>& q, const Operand<const S_>& k, const Operand<const S_>& v,
                        int64_t B2, const kernel::AttentionShape& shape, const kernel::AttentionTiles& at)
      : t(shared_base(), at),
        b1(blockIdx.x / B2),
        b2(blockIdx.x % B2),
        L(static_cast<int>(shape.L)),
        S(static_cast<int>(shape.S)),
        E(static_cast<int>(shape.E)),
        F(static_cast<int>(shape.F)) {
    load_tile(t.q, q, b1, b2, L, E);
    load_tile(t.k, k, b1, b2, S, E);
    load_tile(t.v, v, b1, b2, S, F);
  }
  __device__ static C* shared_base() {
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    return reinterpret_cast<C*>(shared_bytes);
  }
};

template <class S_>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_forward_kernel(Operand<S_> y, Operand<const S_> q, Operand<const S_> k, Operand<const S_> v,
                             int64_t B2, kernel::AttentionShape shape, kernel::AttentionTiles at, double scale,
                             bool causal) {
  using C = compute_t<S_>;
  const BlockStart<C, S_> b(q, k, v, B2, shape, at);
  const Tiles<C>& t = b.t;
  __syncthreads();
  probabilities(t.p, t.q, t.k, b.L, b.S, b.E, static_cast<C>(scale), causal);
  product<C>(b.L, b.F, b.S, [&](int i, int j) { return t.p(i, j); }, [&](int j, int d) { return t.v(j, d); },
             [&](int i, int d, C acc) { y.row(b.b1, b.b2, i)[d] = from_compute<S_>(acc); });
}

template <class S_>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_backward_kernel(Operand<S_> dq, Operand<S_> dk, Operand<S_> dv, Operand<const S_> dy,
                              Operand<const S_> q, Operand<const S_> k, Operand<const S_> v, int64_t B2,
                              kernel::AttentionShape shape, kernel::AttentionTiles at, double scale, bool causal) {
  using C = compute_t<S_>;
  const BlockStart<C, S_> b(q, k, v, B2, shape, at);
  const Tiles<C>& t = b.t;
  const int L = b.L, S = b.S, E = b.E, F = b.F;
  load_tile(t.dy, dy, b.b1, b.b2, L, F);
  __syncthreads();
  probabilities(t.p, t.q, t.k, L, S, E, static_cast<C>(scale), causal);  // as the forward computed them
  product<C>(L, S, F, [&](int i, int d) { return t.dy(i, d); }, [&](int d, int j) { return t.v(j, d); },
             [&](int i, int j, C acc) { t.dp(i, j) = acc; });
  __syncthreads();
  score_grads(t.dp, t.p, L, S, static_cast<C>(scale));
  product<C>(S, F, L, [&](int j, int i) { return t.p(i, j); }, [&](int i, int d) { return t.dy(i, d); },
             [&](int j, int d, C acc) { dv.row(b.b1, b.b2, j)[d] = from_compute<S_>(acc); });
  product<C>(L, E, S, [&](int i, int j) { return t.dp(i, j); }, [&](int j, int e) { return t.k(j, e); },
             [&](int i, int e, C acc) { dq.row(b.b1, b.b2, i)[e] = from_compute<S_>(acc); });
  product<C>(S, E, L, [&](int j, int i) { return t.dp(i, j); }, [&](int i, int e) { return t.q(i, e); },
             [&](int j, int e, C acc) { dk.row(b.b1, b.b2, j)[e] = from_compute<S_>(acc); });
}

kernel::AttentionShape shape_of(const Strided& q, const Strided& k, const Strided& v) {
  return {.L = q.sizes[2], .S = k.sizes[2], .E = q.sizes[3], .F = v.sizes[3]};
}

template <class Kernel, class... Args>
cudaError_t launch(Kernel* kernel, int64_t blocks, size_t bytes, cudaStream_t stream, Args... args) {
  if (blocks == 0) return cudaSuccess;
  const cudaError_t status = allow_shared_memory(kernel, kernel::kAttentionSharedLimit);
  if (status != cudaSuccess) return status;
  kernel<<<static_cast<unsigned>(blocks), kAttentionThreads, bytes, stream>>>(args...);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention_forward(const Strided& y, const Strided& q, const Strided& k, const Strided& v,
                                     double scale, bool causal, cudaStream_t stream) {
  const kernel::AttentionShape shape = shape_of(q, k, v);
  const kernel::AttentionTiles at = kernel::attention_tiles(shape);
  return visit_floating(q.dtype, [&]<class S>() {
    const size_t bytes = static_cast<size_t>(at.forward_elements) * sizeof(compute_t<S>);
    return launch(attention_forward_kernel<S>, q.sizes[0] * q.sizes[1], bytes, stream, operand<S>(y),
                  operand<const S>(q), operand<const S>(k), operand<const S>(v), q.sizes[1], shape, at, scale,
                  causal);
  });
}

cudaError_t launch_attention_backward(const Strided& dq, const Strided& dk, const Strided& dv,
                                      const Strided& dy, const Strided& q, const Strided& k,
                                      const Strided& v, double scale, bool causal, cudaStream_t stream) {
  const kernel::AttentionShape shape = shape_of(q, k, v);
  const kernel::AttentionTiles at = kernel::attention_tiles(shape);
  return visit_floating(q.dtype, [&]<class S>() {
    const size_t bytes = static_cast<size_t>(at.backward_elements) * sizeof(compute_t<S>);
    return launch(attention_backward_kernel<S>, q.sizes[0] * q.sizes[1], bytes, stream, operand<S>(dq),
                  operand<S>(dk), operand<S>(dv), operand<const S>(dy), operand<const S>(q), operand<const S>(k),
                  operand<const S>(v), q.sizes[1], shape, at, scale, causal);
  });
}

}  // namespace loom::cuda
