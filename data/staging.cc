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
  LOOM_CUDA_CHECK(cudaHostAlloc(&data, count * sizeof(T), cudaHostAllocDefault));
  return static_cast<T*>(data);
}

}  // namespace

PinnedBatch::PinnedBatch(int64_t x_capacity, int64_t y_capacity) {
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

Batch PinnedBatch::copy_to(Device device, const Shape& x_sizes) {
  Batch batch{empty(x_sizes, {.device = device}),
              empty({x_sizes[0]}, {.dtype = DType::Int64, .device = device})};
  cudaStream_t stream = cuda::current_stream();
  LOOM_CUDA_CHECK(cudaMemcpyAsync(batch.x.raw_data(), x_, batch.x.numel() * sizeof(float),
                                  cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK(cudaMemcpyAsync(batch.y.raw_data(), y_, batch.y.numel() * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK(cudaEventRecord(event_of(copied_), stream));
  return batch;
}

#else  // no CUDA backend: the DataLoader never stages, since no CUDA device exists

PinnedBatch::PinnedBatch(int64_t, int64_t) {
  throw DeviceError("[DataLoader] pinned staging needs the CUDA backend; this build has none");
}
PinnedBatch::~PinnedBatch() = default;
void PinnedBatch::wait_for_copies() {}
Batch PinnedBatch::copy_to(Device, const Shape&) { return {}; }

#endif

}  // namespace loom::data
