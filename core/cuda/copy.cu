// File: core/cuda/copy.cu
// Copies and fills between any layouts and dtypes: each thread maps its linear
// (row-major) index to an element offset per operand (geometry.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "core/cuda/copy_kernels.h"
#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/visit.cuh"

namespace loom::cuda {

namespace {

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
  for (int64_t i = first_index(); i < n; i += index_step()) {
    D* out = dst + offset_of(i, dg);
    const S* in = src + offset_of(i, sg);
    if constexpr (std::is_same_v<D, S>) {
      *out = *in;
    } else {
      store_double(out, load_as_double(in));
    }
  }
}

// A same-dtype copy whose operands all go by 16-byte packs (packed_geometry):
// a channel slice of a channels-last tensor (cat, its gradient), a crop.
__global__ void copy_packs_kernel(uint4* dst, Geometry dg, const uint4* src, Geometry sg,
                                  int64_t packs) {
  for (int64_t p = first_index(); p < packs; p += index_step()) {
    dst[offset_of(p, dg)] = src[offset_of(p, sg)];
  }
}

template <class D>
__global__ void fill_kernel(D* dst, Geometry dg, double value, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    store_double(dst + offset_of(i, dg), value);
  }
}

template <class D>
__global__ void arange_kernel(D* dst, double start, double step, int64_t n) {
  for (int64_t i = first_index(); i < n; i += index_step()) {
    store_double(dst + i, start + static_cast<double>(i) * step);
  }
}

// Elements a block converts of one span at a time.
constexpr int64_t kSpanTile = kThreads * 4;

// The spans of one launch, by value in the kernel's arguments (2 KiB of the 4).
struct SpanBatch {
  const void* src[kMaxSpansPerLaunch];
  void* dst[kMaxSpansPerLaunch];
  int64_t numel[kMaxSpansPerLaunch];
  int64_t first_tile[kMaxSpansPerLaunch + 1];  // tiles of the spans before; [count]: all
  int count;
};

// Calls move(in, out, i) for every element i of every span, a tile of
// kSpanTile elements per block at a time; numel counts elements of S.
template <class S, class D, class Move>
__device__ void for_each_span_element(const SpanBatch& batch, Move move) {
  const int64_t tiles = batch.first_tile[batch.count];
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int s = owner_of(batch.count, tile, [&](int a) { return batch.first_tile[a]; });
    const S* in = static_cast<const S*>(batch.src[s]);
    D* out = static_cast<D*>(batch.dst[s]);
    const int64_t begin = (tile - batch.first_tile[s]) * kSpanTile;
    const int64_t end = std::min(begin + kSpanTile, batch.numel[s]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) move(in, out, i);
  }
}

// __grid_constant__: indexed in place, not copied to each thread's stack.
template <class D, class S>
__global__ void convert_spans_kernel(const __grid_constant__ SpanBatch batch) {
  for_each_span_element<S, D>(batch, [](const S* in, D* out, int64_t i) {
    store_double(out + i, load_as_double(in + i));
  });
}

// Spans copied as words W whatever their dtype: numel counts words.
template <class W>
__global__ void copy_words_kernel(const __grid_constant__ SpanBatch batch) {
  for_each_span_element<W, W>(batch, [](const W* in, W* out, int64_t i) { out[i] = in[i]; });
}

// The batch of `count` spans, each `unit` bytes per element of numel.
SpanBatch batch_of(const DenseSpan* spans, int count, int64_t unit) {
  SpanBatch batch{};
  batch.count = count;
  for (int s = 0; s < count; ++s) {
    batch.src[s] = spans[s].src;
    batch.dst[s] = spans[s].dst;
    batch.numel[s] = spans[s].numel / unit;
    batch.first_tile[s + 1] = batch.first_tile[s] + (batch.numel[s] + kSpanTile - 1) / kSpanTile;
  }
  return batch;
}

// The widest word (16, 4 or 1 bytes) that divides every span's address and size.
int64_t word_bytes(const DenseSpan* spans, int count) {
  for (int64_t word : {int64_t{16}, int64_t{4}}) {
    bool fits = true;
    for (int s = 0; s < count; ++s) {
      fits = fits && reinterpret_cast<uintptr_t>(spans[s].src) % word == 0 &&
             reinterpret_cast<uintptr_t>(spans[s].dst) % word == 0 && spans[s].numel % word == 0;
    }
    if (fits) return word;
  }
  return 1;
}

}  // namespace

cudaError_t launch_copy_spans(const DenseSpan* spans, int count, cudaStream_t stream) {
  if (count <= 0 || count > kMaxSpansPerLaunch) return cudaErrorInvalidValue;
  const int64_t word = word_bytes(spans, count);
  const SpanBatch batch = batch_of(spans, count, word);
  const int64_t tiles = batch.first_tile[count];
  if (tiles == 0) return cudaSuccess;
  const unsigned blocks = blocks_for_groups(tiles);
  if (word == 16) {
    copy_words_kernel<uint4><<<blocks, kThreads, 0, stream>>>(batch);
  } else if (word == 4) {
    copy_words_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(batch);
  } else {
    copy_words_kernel<uint8_t><<<blocks, kThreads, 0, stream>>>(batch);
  }
  return cudaGetLastError();
}

cudaError_t launch_convert_spans(const DenseSpan* spans, int count, DType dst_dtype,
                                 DType src_dtype, cudaStream_t stream) {
  if (count <= 0 || count > kMaxSpansPerLaunch) return cudaErrorInvalidValue;
  const SpanBatch batch = batch_of(spans, count, 1);
  const int64_t tiles = batch.first_tile[count];
  if (tiles == 0) return cudaSuccess;
  visit_floating(dst_dtype, [&]<class D>() {
    visit_floating(src_dtype, [&]<class S>() {
      convert_spans_kernel<D, S><<<blocks_for_groups(tiles), kThreads, 0, stream>>>(batch);
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_copy(const Strided& dst, const Strided& src, cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  const std::vector<size_t> order = memory_order(dst);  // writes coalesced (geometry.cuh)
  const Geometry dg = geometry_in(dst, order), sg = geometry_in(src, order);
  const int64_t bytes = element_size(dst.dtype), v = 16 / bytes;
  Geometry dst_packs, src_packs;
  if (dst.dtype == src.dtype && 16 % bytes == 0 && packed_geometry(dg, dst.data, v, bytes, &dst_packs) &&
      packed_geometry(sg, src.data, v, bytes, &src_packs)) {
    copy_packs_kernel<<<blocks_for(n / v), kThreads, 0, stream>>>(
        static_cast<uint4*>(dst.data), dst_packs, static_cast<const uint4*>(src.data), src_packs, n / v);
    return cudaGetLastError();
  }
  visit_device_dtype(dst.dtype, [&]<class D>() {
    visit_device_dtype(src.dtype, [&]<class S>() {
      copy_kernel<D, S><<<blocks_for(n), kThreads, 0, stream>>>(
          static_cast<D*>(dst.data), dg, static_cast<const S*>(src.data), sg, n);
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_fill(const Strided& dst, double value, cudaStream_t stream) {
  int64_t n = dst.numel();
  if (n == 0) return cudaSuccess;
  // Walked in memory order, a dense operand of any layout is one dim (geometry.cuh).
  const Geometry dg = geometry_in(dst, memory_order(dst));
  const bool dense = dg.ndim == 0 || (dg.ndim == 1 && dg.strides[0] == 1);
  if (dense && value == 0.0 && !std::signbit(value)) {  // zero bits in every dtype (not -0.0)
    return cudaMemsetAsync(dst.data, 0, static_cast<size_t>(n) * element_size(dst.dtype), stream);
  }
  visit_device_dtype(dst.dtype, [&]<class D>() {
    fill_kernel<D><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<D*>(dst.data), dg, value, n);
  });
  return cudaGetLastError();
}

cudaError_t launch_arange(void* dst, DType dtype, int64_t n, double start, double step, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  visit_device_dtype(dtype, [&]<class D>() {
    arange_kernel<D><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<D*>(dst), start, step, n);
  });
  return cudaGetLastError();
}

}  // namespace loom::cuda
