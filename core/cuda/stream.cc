// File: core/cuda/stream.cc
// The per-thread, per-device streams and the stream override of StreamGuard.
#include "core/cuda/stream.h"

#include <vector>

#include "core/cuda/runtime.h"

namespace loom::cuda {

namespace {

// A stream made on the device current at its first use, kept for the process's
// lifetime: streams are cheap, and destroying one at thread exit could race with
// work still queued on it.
struct ThreadStream {
  cudaStream_t stream = nullptr;
};

// The streams a StreamGuard put in place, by device (nullptr: none).
thread_local std::vector<cudaStream_t> override_streams;

cudaStream_t thread_stream(int device) {
  thread_local PerDevice<ThreadStream> streams;
  ThreadStream& s = streams.get(device);
  if (s.stream == nullptr) {
    DeviceGuard guard(device);
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  }
  return s.stream;
}

cudaStream_t& override_on(int device) {
  if (static_cast<size_t>(device) >= override_streams.size()) {
    override_streams.resize(device + 1, nullptr);
  }
  return override_streams[device];
}

}  // namespace

cudaStream_t current_stream(int device) {
  cudaStream_t chosen = override_on(device);
  return chosen != nullptr ? chosen : thread_stream(device);
}

cudaStream_t current_stream() { return current_stream(current_device()); }

StreamGuard::StreamGuard(cudaStream_t stream) : StreamGuard(stream, current_device()) {}

StreamGuard::StreamGuard(cudaStream_t stream, int device)
    : device_(device), previous_device_(current_device()), previous_(override_on(device_)) {
  if (previous_device_ != device_) LOOM_CUDA_CHECK(cudaSetDevice(device_));
  override_on(device_) = stream;
}

StreamGuard::~StreamGuard() {
  override_on(device_) = previous_;
  if (previous_device_ != device_) cudaSetDevice(previous_device_);
}

void synchronize() { LOOM_CUDA_CHECK(cudaStreamSynchronize(current_stream())); }

bool is_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK(cudaStreamIsCapturing(current_stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace loom::cuda
