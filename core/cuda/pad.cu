// File: core/cuda/pad.cu
// Pad kernels: a grid-stride loop over output elements that copies the element
// each reads (or writes the constant), and one over input elements that sums
// the gradient of the output elements that read it. The index math is the
// CPU's own (core/kernel/pad.h), so both backends read the same elements and
// sum them in the same order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/pad_kernels.h"
#include "core/cuda/visit.cuh"
#include "core/dtype.h"
#include "core/kernel/pad.h"

namespace loom::cuda {

namespace {

using kernel::math::PadDims;

static_assert(kernel::math::kPadMaxDims == kMaxDims, "pad kernels take the runtime's rank limit");

// U moves an element's bits (visit_width); `value` is the constant's bits.
template <class U>
__global__ void pad_kernel(U* out, const U* in, PadDims g, U value, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const kernel::math::PadOffsets at = kernel::math::pad_offsets(g, i);
    out[at.out] = at.in < 0 ? value : in[at.in];
  }
}

template <class S>
__global__ void pad_backward_kernel(S* dx, const S* dy, PadDims g, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    int64_t offset = 0;
    const compute_t<S> sum = kernel::math::pad_grad_sum<compute_t<S>>(
        g, i, &offset, [dy](int64_t o) { return to_compute(dy[o]); });
    dx[offset] = from_compute<S>(sum);
  }
}

// The constant's bits in `dtype`, as the width type U of visit_width.
template <class U>
U value_bits(DType dtype, double value) {
  U bits{};
  visit_dtype(dtype, [&]<class T>() {
    // Only the dtype's own branch runs, and there T and U have one width.
    if constexpr (sizeof(T) == sizeof(U)) {
      const T converted = from_double<T>(value);
      std::memcpy(&bits, &converted, sizeof bits);
    }
  });
  return bits;
}

}  // namespace

cudaError_t launch_pad(const Strided& out, const Strided& in, const kernel::PadSpec& spec,
                       cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const PadDims g = kernel::math::pad_dims(out, in, spec);
  visit_width(out.dtype, [&]<class U>() {
    pad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out.ptr<U>(), in.ptr<const U>(), g,
                                                       value_bits<U>(out.dtype, spec.value), n);
  });
  return cudaGetLastError();
}

cudaError_t launch_pad_backward(const Strided& dx, const Strided& dy, const kernel::PadSpec& spec,
                                cudaStream_t stream) {
  const int64_t n = dx.numel();
  if (n == 0) return cudaSuccess;
  const PadDims g = kernel::math::pad_dims(dy, dx, spec, /*writes_input=*/true);
  visit_floating(dx.dtype, [&]<class S>() {
    pad_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dx.ptr<S>(), dy.ptr<const S>(),
                                                                g, n);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
