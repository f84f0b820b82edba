#include "core/cuda/stream.h"

#include "core/cuda/runtime.h"

namespace loom::cuda {

namespace {

thread_local cudaStream_t override_stream = nullptr;

cudaStream_t thread_stream() {
  // One per thread for the process's lifetime: streams are cheap, and destroying
  // one at thread exit could race with work still queued on it.
  thread_local cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

}  // namespace

cudaStream_t current_stream() { return override_stream ? override_stream : thread_stream(); }

StreamGuard::StreamGuard(cudaStream_t stream) : previous_(override_stream) {
  override_stream = stream;
}
StreamGuard::~StreamGuard() { override_stream = previous_; }

void synchronize() { LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream())); }

bool is_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK(cudaStreamIsCapturing(current_stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace loom::cuda
