// File: core/cuda/copy.cu
// Strided elementwise kernels: each thread maps its linear (row-major) index to
// an element offset per operand, so any layout works, NCHW or NHWC alike.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/kernels.h"

namespace loom::cuda {

namespace {

constexpr int kThreads = 256;

struct Geometry {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
};

Geometry geometry_of(const Strided& t) {
  Geometry g{static_cast<int>(t.sizes.size()), {}, {}};
  for (int d = 0; d < g.ndim; ++d) {
    g.sizes[d] = t.sizes[d];
    g.strides[d] = t.strides[d];
  }
  return g;
}

__device__ int64_t offset_of(int64_t linear, const Geometry& g) {
  int64_t offset = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    offset += (linear % g.sizes[d]) * g.strides[d];
    linear /= g.sizes[d];
  }
  return offset;
}

template <class T>
__device__ double load_as_double(const T* p) { return static_cast<double>(*p); }
template <>
__device__ double load_as_double(const __half* p) { return __half2float(*p); }
template <>
__device__ double load_as_double(const __nv_bfloat16* p) { return __bfloat162float(*p); }

template <class T>
__device__ void store_double(T* p, double v) { *p = static_cast<T>(v); }
template <>
__device__ void store_double(__half* p, double v) { *p = __float2half_rn(static_cast<float>(v)); }
template <>
__device__ void store_double(__nv_bfloat16* p, double v) { *p = __float2bfloat16_rn(static_cast<float>(v)); }
template <>
__device__ void store_double(bool* p, double v) { *p = v != 0.0; }

template <class D, class S>
__global__ void copy_kernel(D* dst, Geometry dg, const S* src, Geometry sg, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    D* out = dst + offset_of(i, dg);
    const S* in = src + offset_of(i, sg);
    if constexpr (std::is_same_v<D, S>) {
      *out = *in;
    } else {
      store_double(out, load_as_double(in));
    }
  }
}

template <class D>
__global__ void fill_kernel(D* dst, Geometry dg, double value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    store_double(dst + offset_of(i, dg), value);
  }
}

template <class T>
__global__ void add_scaled_kernel(T* out, Geometry og, const T* a, Geometry ag, const T* b,
                                  Geometry bg, T alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    out[offset_of(i, og)] = a[offset_of(i, ag)] + alpha * b[offset_of(i, bg)];
  }
}

int blocks_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? blocks : 65535);
}

// Device-side twin of loom::visit_dtype.
template <class Fn>
void visit_device_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: fn.template operator()<float>(); break;
    case DType::Float64: fn.template operator()<double>(); break;
    case DType::Float16: fn.template operator()<__half>(); break;
    case DType::BFloat16: fn.template operator()<__nv_bfloat16>(); break;
    case DType::Int32: fn.template operator()<int32_t>(); break;
    case DType::Int64: fn.template operator()<int64_t>(); break;
    case DType::UInt8: fn.template operator()<uint8_t>(); break;
    case DType::Bool: fn.template operator()<bool>(); break;
  }
}

}  // namespace

cudaError_t launch_copy(const Strided& dst, const Strided& src, cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  visit_device_dtype(dst.dtype, [&]<class D>() {
    visit_device_dtype(src.dtype, [&]<class S>() {
      copy_kernel<D, S><<<blocks_for(n), kThreads, 0, stream>>>(
          static_cast<D*>(dst.data), geometry_of(dst), static_cast<const S*>(src.data),
          geometry_of(src), n);
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_fill(const Strided& dst, double value, cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  visit_device_dtype(dst.dtype, [&]<class D>() {
    fill_kernel<D><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<D*>(dst.data),
                                                           geometry_of(dst), value, n);
  });
  return cudaGetLastError();
}

cudaError_t launch_add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha,
                              cudaStream_t stream) {
  int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  auto launch = [&]<class T>() {
    add_scaled_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<T*>(out.data), geometry_of(out), static_cast<const T*>(a.data), geometry_of(a),
        static_cast<const T*>(b.data), geometry_of(b), static_cast<T>(alpha), n);
  };
  if (out.dtype == DType::Float64) {
    launch.template operator()<double>();
  } else {
    launch.template operator()<float>();
  }
  return cudaGetLastError();
}

}  // namespace loom::cuda
