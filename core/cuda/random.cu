// File: core/cuda/random.cu
// Random fills from Philox blocks (philox_block in core/generator.h, the one
// implementation the CPU uses too). Each thread draws whole blocks, so a block
// is computed once however many elements it feeds.
#include <cmath>
#include <numbers>

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

// rand: 24 bits for float32, 53 for float64, as core/factory.cc.
template <class T>
__device__ T uniform_draw(const PhiloxBlock& bits) {
  if constexpr (std::is_same_v<T, float>) {
    return uniform_float(bits.lane[0]);
  } else {
    return uniform_double(bits.lane[0], bits.lane[1]);
  }
}

// randn: the Box-Muller transform of core/factory.cc, operation for operation.
template <class T>
__device__ T normal_draw(const PhiloxBlock& bits) {
  const double u1 = 1.0 - uniform_double(bits.lane[0], bits.lane[1]);  // (0, 1]: log stays finite
  const double u2 = uniform_double(bits.lane[2], bits.lane[3]);
  return static_cast<T>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

// One thread per element; element i draws from block first_block + i.
template <class T, bool kNormal>
__global__ void fill_random_kernel(T* out, Geometry g, int64_t n, PhiloxArgs philox) {
  const PhiloxStart start = philox_start(philox);
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const PhiloxBlock bits = philox_block(start.seed, start.first_block + i);
    out[offset_of(i, g)] = kNormal ? normal_draw<T>(bits) : uniform_draw<T>(bits);
  }
}

template <bool kNormal>
cudaError_t launch_fill_random(const Strided& out, const PhiloxArgs& philox, cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  visit_float(out.dtype, [&]<class T>() {
    fill_random_kernel<T, kNormal><<<blocks_for(n), kThreads, 0, stream>>>(
        out.ptr<T>(), geometry_of(out), n, philox);
  });
  return cudaGetLastError();
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

cudaError_t launch_fill_uniform(const Strided& out, const PhiloxArgs& philox, cudaStream_t stream) {
  return launch_fill_random<false>(out, philox, stream);
}

cudaError_t launch_fill_normal(const Strided& out, const PhiloxArgs& philox, cudaStream_t stream) {
  return launch_fill_random<true>(out, philox, stream);
}

cudaError_t launch_store_philox_base(uint64_t* base, uint64_t seed, uint64_t offset,
                                     cudaStream_t stream) {
  store_philox_base_kernel<<<1, 1, 0, stream>>>(base, seed, offset);
  return cudaGetLastError();
}

}  // namespace loom::cuda
