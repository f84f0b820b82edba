// File: data/staging.cc
// Pinned batch buffers and their asynchronous copies to the GPU.
#include "data/staging.h"

#include "core/error.h"
#include "core/tensor.h"

#ifdef LOOM_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#endif

// B batch, C channels, H, W image size
namespace loom::data {

#ifdef LOOM_WITH_CUDA

namespace {

cudaEvent_t event_of(void* copied) { return static_cast<cudaEvent_t>(copied); }

template <class T>
T* pinned_array(int64_t count) {
  void* data = nullptr;
  // Portable: pinned for every GPU's context, not only the current one's.
  LOOM_CUDA_CHECK(cudaHostAlloc(&data, count * sizeof(T), cudaHostAllocPortable));
  return static_cast<T*>(data);
}

}  // namespace

PinnedBatch::PinnedBatch(int64_t x_capacity, int64_t y_capacity, Device device)
    : device_(device) {
  DeviceGuard guard(device_);  // the event belongs to the device it is made on
  // Members are released by the destructor, which does not run if this throws.
  try {
    x_ = pinned_array<float>(x_capacity);
    y_ = pinned_array<int64_t>(y_capacity);
    cudaEvent_t event = nullptr;
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    copied_ = event;
  } catch (...) {
    cudaFreeHost(y_);
    cudaFreeHost(x_);
    throw;
  }
}

PinnedBatch::~PinnedBatch() {
  // The host buffers must outlive any copy still reading them.
  cudaEventSynchronize(event_of(copied_));
  cudaEventDestroy(event_of(copied_));
  cudaFreeHost(y_);
  cudaFreeHost(x_);
}

void PinnedBatch::wait_for_copies() {
  // A never-recorded event counts as complete.
  LOOM_CUDA_CHECK(cudaEventSynchronize(event_of(copied_)));
}

Batch PinnedBatch::copy_to_device(const Shape& x_sizes) {
  DeviceGuard guard(device_);
  Batch batch{empty(x_sizes, {.device = device_}),
              empty({x_sizes[0]}, {.dtype = DType::Int64, .device = device_})};
  cudaStream_t stream = cuda::current_stream();
  LOOM_CUDA_CHECK(cudaMemcpyAsync(batch.x.raw_data(), x_, batch.x.numel() * sizeof(float),
                                  cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK(cudaMemcpyAsync(batch.y.raw_data(), y_, batch.y.numel() * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK(cudaEventRecord(event_of(copied_), stream));
  return batch;
}

#else  // no CUDA backend: the DataLoader never stages, since no CUDA device exists

PinnedBatch::PinnedBatch(int64_t, int64_t, Device device) : device_(device) {
  throw DeviceError("[DataLoader] pinned staging needs the CUDA backend; this build has none");
}
PinnedBatch::~PinnedBatch() = default;
void PinnedBatch::wait_for_copies() {}
Batch PinnedBatch::copy_to_device(const Shape&) { return {}; }

#endif

}  // namespace loom::data
