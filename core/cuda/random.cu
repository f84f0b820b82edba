// File: core/cuda/random.cu
// Random fills from Philox blocks (philox_block in core/generator.h, the one
// implementation the CPU uses too). Each thread draws whole blocks, so a block
// is computed once however many elements it feeds.

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/random_kernels.h"
#include "core/generator.h"

namespace loom::cuda {

namespace {

// The seed and the first block of a fill, read from the device inside a graph.
struct PhiloxStart {
  uint64_t seed, first_block;
};

__device__ PhiloxStart philox_start(const PhiloxArgs& a) {
  if (a.base == nullptr) return {a.seed, a.first_block};
  return {a.base[0], a.base[1] + a.first_block};
}

// out = in * m, dropout's mask value m: 0 where the uniform_float of lane
// i % 4 of Philox block i / 4 is below p, else scale; in S's compute type, so
// the mask is never stored. One thread per block; block b feeds elements
// 4b .. 4b + 3.
template <class S>
__global__ void dropout_apply_kernel(S* out, Geometry og, const S* in, Geometry ig, int64_t n, double p,
                                     compute_t<S> scale, PhiloxArgs philox) {
  using C = compute_t<S>;
  const PhiloxStart start = philox_start(philox);
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = first_index(); b < blocks; b += index_step()) {
    const PhiloxBlock bits = philox_block(start.seed, start.first_block + b);
    for (int lane = 0; lane < 4 && 4 * b + lane < n; ++lane) {
      const C m = uniform_float(bits.lane[lane]) < p ? C(0) : scale;
      out[offset_of(4 * b + lane, og)] = from_compute<S>(to_compute(in[offset_of(4 * b + lane, ig)]) * m);
    }
  }
}

// Products and sums rounded once each, never fused into a multiply-add: the
// CPU's x86-64 build computes them apart.
__device__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// rand and uniform_: the unit (exact in T: no more bits than T's significand),
// scaled and shifted in T, as core/factory.cc's uniform_.
template <class T>
__device__ T uniform_draw(const PhiloxBlock& bits, const RandomDraw& d) {
  const T unit = static_cast<T>(uniform_unit(bits.lane, d.bits));
  return add_rn(mul_rn(unit, static_cast<T>(d.span)), static_cast<T>(d.low));
}

// One thread per element; element i draws from block first_block + i, in
// S's compute type, rounded once to S.
template <class S, RandomDraw::Kind kKind>
__global__ void fill_random_kernel(S* out, Geometry g, int64_t n, RandomDraw draw, PhiloxArgs philox) {
  using T = compute_t<S>;
  const PhiloxStart start = philox_start(philox);
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const PhiloxBlock bits = philox_block(start.seed, start.first_block + i);
    T value;
    if constexpr (kKind == RandomDraw::Kind::Uniform) {
      value = uniform_draw<T>(bits, draw);
    } else if constexpr (kKind == RandomDraw::Kind::Normal) {
      value = static_cast<T>(normal_value(bits.lane));
    } else {
      value = static_cast<T>(integer_value(bits.lane, draw.integer_low, draw.range));
    }
    out[offset_of(i, g)] = from_compute<S>(value);
  }
}

template <RandomDraw::Kind kKind>
void launch_kind(const Strided& out, const RandomDraw& draw, const PhiloxArgs& philox, cudaStream_t stream) {
  const int64_t n = out.numel();
  visit_floating(out.dtype, [&]<class S>() {
    fill_random_kernel<S, kKind><<<blocks_for(n), kThreads, 0, stream>>>(
        out.ptr<S>(), geometry_of(out), n, draw, philox);
  });
}

__global__ void store_philox_base_kernel(uint64_t* base, uint64_t seed, uint64_t offset) {
  base[0] = seed;
  base[1] = offset;
}

}  // namespace

cudaError_t launch_dropout_apply(const Strided& out, const Strided& in, double p, const PhiloxArgs& philox,
                                 cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  visit_floating(out.dtype, [&]<class S>() {
    const auto scale = static_cast<compute_t<S>>(1.0 / (1.0 - p));  // infinite for p == 1: nothing is kept
    dropout_apply_kernel<<<blocks_for((n + 3) / 4), kThreads, 0, stream>>>(
        out.ptr<S>(), geometry_of(out), in.ptr<const S>(), geometry_of(in), n, p, scale, philox);
  });
  return cudaGetLastError();
}

cudaError_t launch_fill_random(const Strided& out, const RandomDraw& draw, const PhiloxArgs& philox,
                               cudaStream_t stream) {
  if (out.numel() == 0) return cudaSuccess;
  switch (draw.kind) {
    case RandomDraw::Kind::Uniform: launch_kind<RandomDraw::Kind::Uniform>(out, draw, philox, stream); break;
    case RandomDraw::Kind::Normal: launch_kind<RandomDraw::Kind::Normal>(out, draw, philox, stream); break;
    case RandomDraw::Kind::Integer: launch_kind<RandomDraw::Kind::Integer>(out, draw, philox, stream); break;
  }
  return cudaGetLastError();
}

cudaError_t launch_store_philox_base(uint64_t* base, uint64_t seed, uint64_t offset,
                                     cudaStream_t stream) {
  store_philox_base_kernel<<<1, 1, 0, stream>>>(base, seed, offset);
  return cudaGetLastError();
}

}  // namespace loom::cuda
