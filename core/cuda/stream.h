// File: core/cuda/stream.h
// The stream every Loom kernel, copy and cuDNN call of a thread runs on. It is a
// non-blocking stream per thread (not the legacy default stream), so a training
// step can be captured into a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

namespace loom::cuda {

cudaStream_t current_stream();
// Makes `stream` the calling thread's stream until the guard ends.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t previous_;
};

// Waits for everything queued on the current stream.
void synchronize();
// True while the current stream is capturing a CUDA graph.
bool is_capturing();

}  // namespace loom::cuda
