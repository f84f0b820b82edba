// File: core/cuda/compare.cu
// Comparison, closeness and selection kernels: grid-stride loops over strided operands of
// equal sizes. Comparisons read every dtype (16-bit floats widen to float);
// selection moves raw bits of the element's width.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda/compare_kernels.h"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/visit.cuh"
#include "core/kernel/compare.h"

namespace loom::cuda {

namespace {

using kernel::CompareOp;
using kernel::math::apply_compare;

template <class S>
__global__ void compare_kernel(bool* out, Geometry og, const S* a, Geometry ag, const S* b,
                               Geometry bg, int64_t n, CompareOp op) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    out[offset_of(i, og)] =
        apply_compare(to_compute(a[offset_of(i, ag)]), to_compute(b[offset_of(i, bg)]), op);
  }
}

template <class S>
__global__ void compare_scalar_kernel(bool* out, Geometry og, const S* a, Geometry ag,
                                      double scalar, int64_t n, CompareOp op) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const double value = static_cast<double>(to_compute(a[offset_of(i, ag)]));
    out[offset_of(i, og)] = apply_compare(value, scalar, op);
  }
}

template <class S>
__global__ void isclose_kernel(bool* out, Geometry og, const S* a, Geometry ag, const S* b,
                               Geometry bg, int64_t n, double rtol, double atol, bool equal_nan) {
  using C = kernel::math::close_t<compute_t<S>>;
  const C r = static_cast<C>(rtol), t = static_cast<C>(atol);
  for (int64_t i = first_index(); i < n; i += index_step()) {
    out[offset_of(i, og)] = kernel::math::is_close(static_cast<C>(to_compute(a[offset_of(i, ag)])),
                                                static_cast<C>(to_compute(b[offset_of(i, bg)])),
                                                r, t, equal_nan);
  }
}

template <class U>
__global__ void where_kernel(U* out, Geometry og, const bool* cond, Geometry cg, const U* a,
                             Geometry ag, const U* b, Geometry bg, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    out[offset_of(i, og)] = cond[offset_of(i, cg)] ? a[offset_of(i, ag)] : b[offset_of(i, bg)];
  }
}

}  // namespace

cudaError_t launch_compare(const Strided& out, const Strided& a, const Strided& b, CompareOp op,
                           cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const std::vector<size_t> order = memory_order(out);  // elementwise: any walk gives the result
  visit_device_dtype(a.dtype, [&]<class S>() {
    compare_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        out.ptr<bool>(), geometry_in(out, order), a.ptr<const S>(), geometry_in(a, order),
        b.ptr<const S>(), geometry_in(b, order), n, op);
  });
  return cudaGetLastError();
}

cudaError_t launch_compare_scalar(const Strided& out, const Strided& a, double scalar,
                                  CompareOp op, cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const std::vector<size_t> order = memory_order(out);
  visit_device_dtype(a.dtype, [&]<class S>() {
    compare_scalar_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        out.ptr<bool>(), geometry_in(out, order), a.ptr<const S>(), geometry_in(a, order), scalar,
        n, op);
  });
  return cudaGetLastError();
}

cudaError_t launch_isclose(const Strided& out, const Strided& a, const Strided& b, double rtol,
                           double atol, bool equal_nan, cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const std::vector<size_t> order = memory_order(out);
  visit_device_dtype(a.dtype, [&]<class S>() {
    isclose_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        out.ptr<bool>(), geometry_in(out, order), a.ptr<const S>(), geometry_in(a, order),
        b.ptr<const S>(), geometry_in(b, order), n, rtol, atol, equal_nan);
  });
  return cudaGetLastError();
}

cudaError_t launch_where(const Strided& out, const Strided& cond, const Strided& a,
                         const Strided& b, cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const std::vector<size_t> order = memory_order(out);
  visit_width(out.dtype, [&]<class U>() {
    where_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        out.ptr<U>(), geometry_in(out, order), cond.ptr<const bool>(), geometry_in(cond, order),
        a.ptr<const U>(), geometry_in(a, order), b.ptr<const U>(), geometry_in(b, order), n);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
