// File: core/cuda/elementwise.cu
// Elementwise kernels: one functor per kernel family applied by a grid-stride
// map (one input) or zip (two inputs) over strided operands. The math is the
// CPU's own (core/kernel/elementwise.h), in the operands' dtype, or in
// float32 for bfloat16 and float16 operands (element.cuh).
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/cuda/element.cuh"
#include "core/cuda/elementwise_kernels.h"
#include "core/cuda/geometry.cuh"
#include "core/kernel/activation.h"
#include "core/kernel/elementwise.h"

namespace loom::cuda {

namespace {

using kernel::BinaryOp;
using kernel::UnaryOp;

using kernel::math::apply_binary;
using kernel::math::apply_unary;

// ---- functors: what one element computes --------------------------------------

template <class T>
struct Unary {
  UnaryOp op;
  __device__ T operator()(T x) const { return apply_unary(x, op); }
};

template <class T>
struct Binary {
  BinaryOp op;
  __device__ T operator()(T a, T b) const { return apply_binary(a, b, op); }
};

template <class T>
struct BinaryScalar {
  BinaryOp op;
  T scalar;
  bool scalar_first;
  __device__ T operator()(T a) const {
    return scalar_first ? apply_binary(scalar, a, op) : apply_binary(a, scalar, op);
  }
};

template <class T>
struct AddScaled {
  T alpha;
  __device__ T operator()(T a, T b) const { return kernel::math::scaled_sum(a, b, alpha); }
};

// std::min(std::max(x, lo), hi) spelled out (not fminf/fmaxf, which drop NaN),
// so lo > hi gives hi as on the CPU.
template <class T>
struct Clamp {
  T lo, hi;
  __device__ T operator()(T x) const {
    if (std::isnan(x)) return x;
    T above_lo = x < lo ? lo : x;
    return hi < above_lo ? hi : above_lo;
  }
};

template <class T>
struct ClampBackward {
  T lo, hi;
  __device__ T operator()(T dy, T x) const { return x >= lo && x <= hi ? dy : T(0); }
};

// One activation row (core/kernel/activation.h) and its two scalars.
template <class T, class Row>
struct ActivationForward {
  T p0, p1;
  __device__ T operator()(T x) const { return Row::forward(x, p0, p1); }
};

// The sum in the compute type (float32 for 16-bit operands: rounded once, on store).
template <class T, class Row>
struct AddActivation {
  T p0, p1;
  __device__ T operator()(T a, T b) const { return Row::forward(a + b, p0, p1); }
};

template <class T, class Row>
struct ActivationBackward {
  T p0, p1;
  __device__ T operator()(T dy, T saved) const { return Row::backward(dy, saved, p0, p1); }
};

// ---- kernels and launch helpers ---------------------------------------------------

// S is the storage type; fn computes in compute_t<S>.
template <class S, class Fn>
__global__ void map_kernel(S* out, Geometry og, const S* in, Geometry ig, int64_t n, Fn fn) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    out[offset_of(i, og)] = from_compute<S>(fn(to_compute(in[offset_of(i, ig)])));
  }
}

template <class S, class Fn>
__global__ void zip_kernel(S* out, Geometry og, const S* a, Geometry ag, const S* b, Geometry bg,
                           int64_t n, Fn fn) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const compute_t<S> x = to_compute(a[offset_of(i, ag)]), y = to_compute(b[offset_of(i, bg)]);
    out[offset_of(i, og)] = from_compute<S>(fn(x, y));
  }
}

// Dense operands (one stride-1 dim in the walk's order, 16-byte aligned) are
// walked a 16-byte pack at a time: a quarter to an eighth of the loads, and no
// offset arithmetic.
bool dense_packs(const Geometry& g, const void* data) {
  return (g.ndim == 0 || (g.ndim == 1 && g.strides[0] == 1)) &&
         reinterpret_cast<uintptr_t>(data) % 16 == 0;
}

template <class S, class Fn>
__global__ void map_dense_kernel(S* out, const S* in, int64_t n, Fn fn) {
  constexpr int V = kPackOf<S>;
  using P = Pack<S, V>;
  for (int64_t i = first_index(); i < n / V; i += index_step()) {
    const P x = load_pack<V>(in + i * V);
    P r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = from_compute<S>(fn(to_compute(x.v[j])));
    store_pack(out + i * V, r);
  }
  for (int64_t i = n / V * V + first_index(); i < n; i += index_step()) {
    out[i] = from_compute<S>(fn(to_compute(in[i])));
  }
}

template <class S, class Fn>
__global__ void zip_dense_kernel(S* out, const S* a, const S* b, int64_t n, Fn fn) {
  constexpr int V = kPackOf<S>;
  using P = Pack<S, V>;
  for (int64_t i = first_index(); i < n / V; i += index_step()) {
    const P x = load_pack<V>(a + i * V), y = load_pack<V>(b + i * V);
    P r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = from_compute<S>(fn(to_compute(x.v[j]), to_compute(y.v[j])));
    store_pack(out + i * V, r);
  }
  for (int64_t i = n / V * V + first_index(); i < n; i += index_step()) {
    out[i] = from_compute<S>(fn(to_compute(a[i]), to_compute(b[i])));
  }
}

// Operands that are strided but go by packs (packed_geometry: a channel slice of
// a channels-last tensor, a per-channel operand broadcast over the rows): a pack
// at a time, offsets in packs.
template <class S, class Fn>
__global__ void map_packs_kernel(S* out, Geometry og, const S* in, Geometry ig, int64_t packs, Fn fn) {
  constexpr int V = kPackOf<S>;
  for (int64_t p = first_index(); p < packs; p += index_step()) {
    const Pack<S, V> x = load_pack<V>(in + offset_of(p, ig) * V);
    Pack<S, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = from_compute<S>(fn(to_compute(x.v[j])));
    store_pack(out + offset_of(p, og) * V, r);
  }
}

template <class S, class Fn>
__global__ void zip_packs_kernel(S* out, Geometry og, const S* a, Geometry ag, const S* b,
                                 Geometry bg, int64_t packs, Fn fn) {
  constexpr int V = kPackOf<S>;
  for (int64_t p = first_index(); p < packs; p += index_step()) {
    const Pack<S, V> x = load_pack<V>(a + offset_of(p, ag) * V), y = load_pack<V>(b + offset_of(p, bg) * V);
    Pack<S, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = from_compute<S>(fn(to_compute(x.v[j]), to_compute(y.v[j])));
    store_pack(out + offset_of(p, og) * V, r);
  }
}

// The operands' pack geometries (packed_geometry, packs of S) when all go by packs.
template <class S, size_t K>
bool all_packed(const std::array<const Strided*, K>& operands, const std::array<Geometry, K>& walks,
                std::array<Geometry, K>* packed) {
  for (size_t k = 0; k < K; ++k) {
    if (!packed_geometry(walks[k], operands[k]->data, kPackOf<S>, sizeof(S), &(*packed)[k])) return false;
  }
  return true;
}

// Which dtypes a launch instantiates: the floating ones, or with the integer
// ones too (arithmetic).
enum class Dtypes { Floating, Arithmetic };

template <Dtypes kDtypes, class Fn>
void visit_storage(DType dtype, Fn&& fn) {
  if constexpr (kDtypes == Dtypes::Arithmetic) {
    visit_arithmetic_storage(dtype, std::forward<Fn>(fn));
  } else {
    visit_floating(dtype, std::forward<Fn>(fn));
  }
}

// out = fn(in), with fn = make_fn.template operator()<T>() for the dtype's
// compute type T.
template <Dtypes kDtypes = Dtypes::Floating, class MakeFn>
cudaError_t launch_map(const Strided& out, const Strided& in, cudaStream_t stream, MakeFn make_fn) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const std::vector<size_t> order = memory_order(out);
  const Geometry og = geometry_in(out, order), ig = geometry_in(in, order);
  visit_storage<kDtypes>(out.dtype, [&]<class S>() {
    const auto fn = make_fn.template operator()<compute_t<S>>();
    std::array<Geometry, 2> packed;
    if (dense_packs(og, out.data) && dense_packs(ig, in.data)) {
      map_dense_kernel<<<blocks_for(n / kPackOf<S> + 1), kThreads, 0, stream>>>(
          out.ptr<S>(), in.ptr<const S>(), n, fn);
    } else if (all_packed<S, 2>({&out, &in}, {og, ig}, &packed)) {
      map_packs_kernel<<<blocks_for(n / kPackOf<S>), kThreads, 0, stream>>>(
          out.ptr<S>(), packed[0], in.ptr<const S>(), packed[1], n / kPackOf<S>, fn);
    } else {
      map_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out.ptr<S>(), og, in.ptr<const S>(), ig, n, fn);
    }
  });
  return cudaGetLastError();
}

// out = fn(a, b), as launch_map.
template <Dtypes kDtypes = Dtypes::Floating, class MakeFn>
cudaError_t launch_zip(const Strided& out, const Strided& a, const Strided& b, cudaStream_t stream,
                       MakeFn make_fn) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const std::vector<size_t> order = memory_order(out);
  const Geometry og = geometry_in(out, order), ag = geometry_in(a, order), bg = geometry_in(b, order);
  visit_storage<kDtypes>(out.dtype, [&]<class S>() {
    const auto fn = make_fn.template operator()<compute_t<S>>();
    std::array<Geometry, 3> packed;
    if (dense_packs(og, out.data) && dense_packs(ag, a.data) && dense_packs(bg, b.data)) {
      zip_dense_kernel<<<blocks_for(n / kPackOf<S> + 1), kThreads, 0, stream>>>(
          out.ptr<S>(), a.ptr<const S>(), b.ptr<const S>(), n, fn);
    } else if (all_packed<S, 3>({&out, &a, &b}, {og, ag, bg}, &packed)) {
      zip_packs_kernel<<<blocks_for(n / kPackOf<S>), kThreads, 0, stream>>>(
          out.ptr<S>(), packed[0], a.ptr<const S>(), packed[1], b.ptr<const S>(), packed[2],
          n / kPackOf<S>, fn);
    } else {
      zip_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out.ptr<S>(), og, a.ptr<const S>(), ag,
                                                         b.ptr<const S>(), bg, n, fn);
    }
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_unary(const Strided& out, const Strided& in, UnaryOp op, cudaStream_t stream) {
  return launch_map<Dtypes::Arithmetic>(out, in, stream, [&]<class T>() { return Unary<T>{op}; });
}

cudaError_t launch_activation_forward(const Strided& y, const Strided& x, kernel::ActivationKind kind,
                                      const kernel::ActivationParameters& parameters, cudaStream_t stream) {
  return kernel::visit_activation(kind, [&]<class Row>() {
    return launch_map(y, x, stream, [&]<class T>() {
      return ActivationForward<T, Row>{static_cast<T>(parameters[0]), static_cast<T>(parameters[1])};
    });
  });
}

cudaError_t launch_add_activation(const Strided& y, const Strided& a, const Strided& b, kernel::ActivationKind kind,
                                  const kernel::ActivationParameters& parameters, cudaStream_t stream) {
  return kernel::visit_activation(kind, [&]<class Row>() {
    return launch_zip(y, a, b, stream, [&]<class T>() {
      return AddActivation<T, Row>{static_cast<T>(parameters[0]), static_cast<T>(parameters[1])};
    });
  });
}

cudaError_t launch_activation_backward(const Strided& dx, const Strided& dy, const Strided& saved,
                                       kernel::ActivationKind kind, const kernel::ActivationParameters& parameters,
                                       cudaStream_t stream) {
  return kernel::visit_activation(kind, [&]<class Row>() {
    return launch_zip(dx, dy, saved, stream, [&]<class T>() {
      return ActivationBackward<T, Row>{static_cast<T>(parameters[0]), static_cast<T>(parameters[1])};
    });
  });
}

cudaError_t launch_binary(const Strided& out, const Strided& a, const Strided& b, BinaryOp op,
                          cudaStream_t stream) {
  return launch_zip<Dtypes::Arithmetic>(out, a, b, stream, [&]<class T>() { return Binary<T>{op}; });
}

cudaError_t launch_binary_scalar(const Strided& out, const Strided& a, double scalar, BinaryOp op,
                                 bool scalar_first, cudaStream_t stream) {
  return launch_map<Dtypes::Arithmetic>(out, a, stream, [&]<class T>() {
    return BinaryScalar<T>{op, kernel::math::scalar_as<T>(scalar), scalar_first};
  });
}

cudaError_t launch_add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha,
                              cudaStream_t stream) {
  return launch_zip<Dtypes::Arithmetic>(out, a, b, stream,
                                        [&]<class T>() { return AddScaled<T>{kernel::math::scalar_as<T>(alpha)}; });
}

cudaError_t launch_clamp(const Strided& out, const Strided& in, double lo, double hi,
                         cudaStream_t stream) {
  return launch_map(out, in, stream, [&]<class T>() {
    return Clamp<T>{static_cast<T>(lo), static_cast<T>(hi)};
  });
}

cudaError_t launch_clamp_backward(const Strided& dx, const Strided& dy, const Strided& x, double lo,
                                  double hi, cudaStream_t stream) {
  return launch_zip(dx, dy, x, stream, [&]<class T>() {
    return ClampBackward<T>{static_cast<T>(lo), static_cast<T>(hi)};
  });
}

}  // namespace loom::cuda
