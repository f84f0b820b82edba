// File: core/cuda/stream.h
// The stream every Loom kernel, copy and cuDNN call of a thread runs on: a
// non-blocking stream per thread and GPU (not the legacy default stream), so a
// training step can be captured into a CUDA graph, and work on one GPU never
// lands on another's stream.
#pragma once

#include <cuda_runtime_api.h>

#include "core/cuda/capture.h"

namespace loom::cuda {

// The calling thread's stream on the current device.
cudaStream_t current_stream();
// The calling thread's stream on `device`.
cudaStream_t current_stream(int device);

// Makes `stream`, a stream of GPU `device`, the calling thread's stream there
// and that device the current one, until the guard ends. (CUDA cannot tell a
// stream's device while it is being captured, so the caller says it.)
class StreamGuard {
 public:
  StreamGuard(cudaStream_t stream, int device);
  // A stream of the current device.
  explicit StreamGuard(cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  int previous_device_;
  cudaStream_t previous_;
};

}  // namespace loom::cuda
