// File: core/cuda/sort.cu
// Row sorts: each key becomes an unsigned integer whose order is the row's
// order (NaN greatest, -0 as +0, descending by complement, which keeps equal
// keys in their order), and CUB's segmented stable radix sort orders (key,
// position) pairs. Only the positions come out; the ops layer gathers the
// values, so they keep their own bits.
// Running sums and products: a warp per line when the scanned dim is the
// innermost (32 consecutive elements a step, scanned with shuffles), else a
// thread per line, whose neighbours read neighbouring addresses.
#include <cub/device/device_segmented_sort.cuh>

#include <cstdint>
#include <type_traits>

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/sort_kernels.h"

namespace loom::cuda {

namespace {

// The unsigned type a key's order is encoded in: 64 bits for int64 and double,
// 8 for uint8 and Bool (one radix pass), 32 for the rest (16-bit floats through
// float, which keeps their order).
// Spelled out rather than deduced from ordered_bits, whose body the host pass
// of nvcc does not see.
template <class S>
struct OrderedOf {
  using type = uint32_t;
};
template <>
struct OrderedOf<int64_t> {
  using type = uint64_t;
};
template <>
struct OrderedOf<double> {
  using type = uint64_t;
};
template <>
struct OrderedOf<uint8_t> {
  using type = uint8_t;
};
template <>
struct OrderedOf<bool> {
  using type = uint8_t;
};
template <class S>
using ordered_t = typename OrderedOf<S>::type;

// The order-preserving unsigned image of a key.
template <class S>
__device__ ordered_t<S> ordered_bits(S value) {
  if constexpr (std::is_same_v<S, int64_t>) {
    return static_cast<uint64_t>(value) ^ (uint64_t{1} << 63);
  } else if constexpr (std::is_same_v<S, int32_t>) {
    return static_cast<uint32_t>(value) ^ 0x80000000u;
  } else if constexpr (std::is_same_v<S, uint8_t> || std::is_same_v<S, bool>) {
    return static_cast<uint8_t>(value);
  } else if constexpr (std::is_same_v<S, double>) {
    if (isnan(value)) return ~uint64_t{0};
    const auto bits = static_cast<uint64_t>(__double_as_longlong(value == 0.0 ? 0.0 : value));
    return bits >> 63 ? ~bits : bits | (uint64_t{1} << 63);
  } else {
    const float f = to_compute(value);
    if (isnan(f)) return ~uint32_t{0};
    const uint32_t bits = __float_as_uint(f == 0.0f ? 0.0f : f);
    return bits >> 31 ? ~bits : bits | 0x80000000u;
  }
}

template <class S, class U>
__global__ void encode_rows_kernel(U* keys, int64_t* positions, int64_t* offsets, const S* in, int64_t rows,
                                   int64_t n, bool descending) {
  for (int64_t i = first_index(); i < rows * n; i += index_step()) {
    const U bits = ordered_bits(in[i]);
    keys[i] = descending ? static_cast<U>(~bits) : bits;
    positions[i] = i % n;
  }
  for (int64_t r = first_index(); r <= rows; r += index_step()) offsets[r] = r * n;
}

// Scratch: encoded keys in and out, positions in, row offsets, then CUB's own
// (from `cub` to the end of the scratch, whose size the caller asked CUB for once).
struct ScratchLayout {
  size_t keys_in, keys_out, positions, offsets, cub;
};

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

template <class S>
ScratchLayout layout_for(int64_t rows, int64_t n) {
  using U = ordered_t<S>;
  ScratchLayout s{};
  const auto items = static_cast<size_t>(rows * n);
  s.keys_out = s.keys_in + aligned(items * sizeof(U));
  s.positions = s.keys_out + aligned(items * sizeof(U));
  s.offsets = s.positions + aligned(items * sizeof(int64_t));
  s.cub = s.offsets + aligned(static_cast<size_t>(rows + 1) * sizeof(int64_t));
  return s;
}

// CUB's own scratch for a (rows, n) sort; 0 when it cannot say (the sort then reports the error).
template <class S>
size_t cub_scratch_bytes(int64_t rows, int64_t n) {
  using U = ordered_t<S>;
  size_t cub_bytes = 0;
  const cudaError_t status = cub::DeviceSegmentedSort::StableSortPairs(
      nullptr, cub_bytes, static_cast<const U*>(nullptr), static_cast<U*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), rows * n, rows,
      static_cast<const int64_t*>(nullptr), static_cast<const int64_t*>(nullptr));
  return status == cudaSuccess ? cub_bytes : 0;
}

struct RowShape {
  int64_t rows, n;
};

RowShape row_shape(const Strided& keys) {
  const int64_t n = keys.sizes.empty() ? 1 : keys.sizes.back();
  return {n == 0 ? 0 : keys.numel() / n, n};
}

template <class S>
cudaError_t sort_rows(const Strided& indices, const Strided& keys, bool descending, void* scratch,
                      size_t scratch_bytes, cudaStream_t stream) {
  using U = ordered_t<S>;
  const auto [rows, n] = row_shape(keys);
  if (rows * n == 0) return cudaSuccess;
  const ScratchLayout s = layout_for<S>(rows, n);
  if (scratch_bytes < s.cub) return cudaErrorInvalidValue;
  cudaError_t status = cudaSuccess;
  auto* base = static_cast<char*>(scratch);
  auto* keys_in = reinterpret_cast<U*>(base + s.keys_in);
  auto* keys_out = reinterpret_cast<U*>(base + s.keys_out);
  auto* positions = reinterpret_cast<int64_t*>(base + s.positions);
  auto* offsets = reinterpret_cast<int64_t*>(base + s.offsets);
  encode_rows_kernel<<<blocks_for(rows * n + 1), kThreads, 0, stream>>>(keys_in, positions, offsets,
                                                                         keys.ptr<const S>(), rows, n, descending);
  if ((status = cudaGetLastError()) != cudaSuccess) return status;
  size_t cub_bytes = scratch_bytes - s.cub;
  return cub::DeviceSegmentedSort::StableSortPairs(base + s.cub, cub_bytes, keys_in, keys_out, positions,
                                                   indices.ptr<int64_t>(), rows * n, rows, offsets, offsets + 1,
                                                   stream);
}

// Calls fn.template operator()<S>() with S the device storage type of any dtype.
template <class Fn>
decltype(auto) visit_sortable(DType dtype, Fn&& fn) {
  if (dtype == DType::Bool) return fn.template operator()<bool>();
  return visit_arithmetic_storage(dtype, std::forward<Fn>(fn));
}

// ---- running sums and products ---------------------------------------------------------

// The type a running sum or product combines in: float for the 16-bit formats,
// an unsigned type at least as wide for integers (wrapping around), else the
// dtype's own.
template <class S>
struct ScanOf {
  using type = compute_t<S>;
};
template <>
struct ScanOf<int32_t> {
  using type = uint32_t;
};
template <>
struct ScanOf<int64_t> {
  using type = uint64_t;
};
template <>
struct ScanOf<uint8_t> {
  using type = uint32_t;
};
template <class S>
using scan_t = typename ScanOf<S>::type;

template <class S>
__device__ S store_scan(scan_t<S> total) {
  if constexpr (std::is_integral_v<S>) {
    return static_cast<S>(total);
  } else {
    return from_compute<S>(total);
  }
}

template <class S>
__device__ scan_t<S> load_scan(S value) {
  if constexpr (std::is_integral_v<S>) {
    return static_cast<scan_t<S>>(value);
  } else {
    return to_compute(value);
  }
}

// A sum or a product, with its identity.
template <class A>
struct Combine {
  bool product;
  __device__ A identity() const { return product ? A(1) : A(0); }
  __device__ A operator()(A a, A b) const { return product ? a * b : a + b; }
};

// One warp per line of n contiguous elements: 32 at a time, an inclusive
// shuffle scan combined with the carry of the elements before.
template <class S>
__global__ void scan_rows_kernel(S* out, const S* in, int64_t lines, int64_t n, Combine<scan_t<S>> combine,
                                 bool reverse) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t line = first_index() / kWarp; line < lines; line += warps) {
    scan_t<S> carry = combine.identity();
    for (int64_t start = 0; start < n; start += kWarp) {
      const int64_t k = start + lane;
      const int64_t i = line * n + (reverse ? n - 1 - k : k);
      scan_t<S> value = k < n ? load_scan(in[i]) : combine.identity();
      for (int offset = 1; offset < kWarp; offset *= 2) {
        const scan_t<S> before = __shfl_up_sync(kFullMask, value, offset);
        if (lane >= offset) value = combine(before, value);
      }
      value = combine(carry, value);
      if (k < n) out[i] = store_scan<S>(value);
      carry = __shfl_sync(kFullMask, value, kWarp - 1);
    }
  }
}

// One thread per line (outer, inner): element k of it at (o * n + k) * inner + i.
template <class S>
__global__ void scan_strided_kernel(S* out, const S* in, int64_t outer, int64_t n, int64_t inner,
                                    Combine<scan_t<S>> combine, bool reverse) {
  for (int64_t line = first_index(); line < outer * inner; line += index_step()) {
    const int64_t base = line / inner * n * inner + line % inner;
    scan_t<S> total = combine.identity();
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + (reverse ? n - 1 - k : k) * inner;
      total = combine(total, load_scan(in[i]));
      out[i] = store_scan<S>(total);
    }
  }
}

}  // namespace

size_t sort_rows_scratch_bytes(const Strided& keys) {
  const auto [rows, n] = row_shape(keys);
  if (rows * n == 0) return 0;
  return visit_sortable(keys.dtype,
                        [&]<class S>() { return layout_for<S>(rows, n).cub + cub_scratch_bytes<S>(rows, n); });
}

cudaError_t launch_sort_rows(const Strided& indices, const Strided& keys, bool descending, void* scratch,
                             size_t scratch_bytes, cudaStream_t stream) {
  return visit_sortable(keys.dtype, [&]<class S>() {
    return sort_rows<S>(indices, keys, descending, scratch, scratch_bytes, stream);
  });
}

cudaError_t launch_scan(const Strided& out, const Strided& in, int64_t outer, int64_t n, int64_t inner,
                        kernel::ScanOp op, bool reverse, cudaStream_t stream) {
  if (outer * n * inner == 0) return cudaSuccess;
  return visit_arithmetic_storage(in.dtype, [&]<class S>() {
    const Combine<scan_t<S>> combine{op == kernel::ScanOp::Prod};
    if (inner == 1) {
      const int64_t threads = outer * kWarp;
      scan_rows_kernel<<<blocks_for(threads), kThreads, 0, stream>>>(out.ptr<S>(), in.ptr<const S>(), outer, n,
                                                                     combine, reverse);
    } else {
      scan_strided_kernel<<<blocks_for(outer * inner), kThreads, 0, stream>>>(out.ptr<S>(), in.ptr<const S>(),
                                                                              outer, n, inner, combine, reverse);
    }
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda
