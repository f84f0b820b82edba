// File: core/cuda/runtime.h
// The CUDA runtime layer: device discovery, device memory, host<->device copies
// and the checked launch of the basic kernels. Every CUDA call goes through
// LOOM_CUDA_CHECK, which throws loom::CudaError naming the statement and file:line.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda/copy.h"
#include "core/cuda/copy_kernels.h"
#include "core/strided.h"

namespace loom::cuda {

// Throws CudaError (OutOfMemoryError for cudaErrorMemoryAllocation) unless ok.
void check_status(cudaError_t status, const char* statement, const char* file, int line);

// GPUs usable by this process; 0 where there is no driver or no device.
int device_count();

// The calling thread's current GPU (CUDA's per-thread device): kernels, streams,
// handles and plans act on it. Ops make their operands' device current with a
// DeviceGuard, so nothing runs on a GPU because it happens to be device 0.
int current_device();

// Makes `device` the calling thread's current GPU until the guard ends, then
// restores the previous one. Cheap when it is current already.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_;
};

// f() with `device` current.
template <class F>
decltype(auto) on_device(int device, F&& f) {
  DeviceGuard guard(device);
  return f();
}

// One T per GPU, made on first use on that GPU, for state CUDA binds to the
// device current at its creation (a thread's stream, cuDNN and cuBLAS handles,
// workspaces, scratch). Elements never move, so references stay valid.
template <class T>
class PerDevice {
 public:
  T& get(int device) {
    if (static_cast<size_t>(device) >= items_.size()) items_.resize(device + 1);
    if (!items_[device]) items_[device] = std::make_unique<T>();
    return *items_[device];
  }
  // The current device's T.
  T& current() { return get(current_device()); }

 private:
  std::vector<std::unique_ptr<T>> items_;
};

// Device memory on GPU `device`, from the caching allocator (see allocator.h:
// a freed buffer is reused in stream order; OutOfMemoryError after a retry).
void* malloc_device(size_t nbytes, int device);
void free_device(void* ptr, int device) noexcept;

// Synchronous for the host side: copy_to_host returns with dst filled;
// copy_to_device returns once src has been read (the device copy is ordered
// on the current stream). Both stage through pinned host memory, and both act
// on the current device, which must be the one holding the device pointer.
void copy_to_host(void* dst, const void* src, size_t nbytes);
void copy_to_device(void* dst, const void* src, size_t nbytes);

// Throws ValueError naming `op` when `t` has more dims than CUDA kernels take
// (kMaxDims); every host wrapper of a kernel calls it for each operand.
void check_kernel_rank(const Strided& t, const char* op);

// Copies `nbytes` of dense memory from GPU `src_device` to GPU `dst_device`
// (cudaMemcpyPeerAsync, which the driver stages through the host where the GPUs
// have no peer access), ordered after the work queued on both devices' current streams and
// before later work on either, so neither buffer is reused too early.
void copy_between_devices(void* dst, int dst_device, const void* src, int src_device,
                          size_t nbytes);


// dst = convert(src) for every span (dense arrays, floating dtypes), one launch
// per kMaxSpansPerLaunch spans: many small conversions (a model's weight casts
// under autocast, their gradients) cost a launch or two instead of one each.
void convert_spans(const std::vector<DenseSpan>& spans, DType dst_dtype, DType src_dtype);
// Launches convert_spans has made in this process (tests check the batching).
int64_t convert_span_launches();

// Copies every span's bytes (numel counts bytes here), one launch per
// kMaxSpansPerLaunch spans: a training step's input batch and targets in one.
void copy_spans(const std::vector<DenseSpan>& spans);
// Launches copy_spans has made in this process.
int64_t copy_span_launches();

}  // namespace loom::cuda

#define LOOM_CUDA_CHECK(statement) \
  ::loom::cuda::check_status((statement), #statement, __FILE__, __LINE__)
