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

// A constant pad a 16-byte pack at a time (packed_pad): offsets in packs, and
// `value` the constant's bits repeated through the pack.
__global__ void pad_packs_kernel(uint4* out, const uint4* in, PadDims g, uint4 value, int64_t packs) {
  for (int64_t p = first_index(); p < packs; p += index_step()) {
    const kernel::math::PadOffsets at = kernel::math::pad_offsets(g, p);
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

// `g` (a constant pad) in 16-byte packs, when its innermost dim moves a pack
// at a time: unit stride on both sides, extents and pad whole packs, the other
// strides whole packs and both tensors pack-aligned. A channel pad of a
// channels-last tensor fits (the option-A shortcut of the CIFAR ResNets, and
// its gradient, the opposite crop).
bool packed_pad(const PadDims& g, const Strided& out, const Strided& in, PadDims* packed) {
  const int64_t bytes = static_cast<int64_t>(element_size(out.dtype)), v = 16 / bytes, last = g.ndim - 1;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  bool fits = g.mode == kernel::PadMode::Constant && g.ndim > 0 && 16 % bytes == 0 &&
              aligned(out.data) && aligned(in.data) && g.in_strides[last] == 1 &&
              g.out_strides[last] == 1 && g.in_sizes[last] % v == 0 && g.out_sizes[last] % v == 0 &&
              g.before[last] % v == 0;
  for (int64_t d = 0; fits && d < last; ++d) fits = g.in_strides[d] % v == 0 && g.out_strides[d] % v == 0;
  if (!fits) return false;
  *packed = g;
  packed->in_sizes[last] /= v;
  packed->out_sizes[last] /= v;
  packed->before[last] /= v;
  for (int64_t d = 0; d < last; ++d) {
    packed->in_strides[d] /= v;
    packed->out_strides[d] /= v;
  }
  kernel::math::set_pad_dividers(*packed);
  return true;
}

// The constant's bits in `dtype`, repeated through a 16-byte pack.
uint4 value_pack(DType dtype, double value) {
  unsigned char bytes[16];
  visit_width(dtype, [&]<class U>() {
    const U bits = value_bits<U>(dtype, value);
    for (size_t offset = 0; offset < sizeof bytes; offset += sizeof(U)) std::memcpy(bytes + offset, &bits, sizeof(U));
  });
  uint4 pack;
  std::memcpy(&pack, bytes, sizeof pack);
  return pack;
}

}  // namespace

cudaError_t launch_pad(const Strided& out, const Strided& in, const kernel::PadSpec& spec,
                       cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const PadDims g = kernel::math::pad_dims(out, in, spec);
  if (PadDims packed; packed_pad(g, out, in, &packed)) {
    const int64_t packs = n * static_cast<int64_t>(element_size(out.dtype)) / 16;
    pad_packs_kernel<<<blocks_for(packs), kThreads, 0, stream>>>(
        static_cast<uint4*>(out.data), static_cast<const uint4*>(in.data), packed,
        value_pack(out.dtype, spec.value), packs);
    return cudaGetLastError();
  }
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
