// File: core/cuda/event_timer.cc
// Timing GPU work between two CUDA events on the current stream.
#include "core/cuda/event_timer.h"

#include <cstddef>
#include <map>
#include <mutex>

#include "core/cuda/hold_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

EventTimer::EventTimer() {
  LOOM_CUDA_CHECK(cudaEventCreate(&start_));
  LOOM_CUDA_CHECK(cudaEventCreate(&stop_));
}

// Not checked: a destructor must not throw, and a failed destroy leaks one event.
EventTimer::~EventTimer() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

// The hold keeps the stream busy while the host enqueues the timed work, so the
// time counts the GPU's work only, as a captured step replays it: a cuDNN
// candidate's execute call does host work (the plan lookup, the variant pack)
// that a replay does not, and an idle GPU waiting on it would be timed.
constexpr uint64_t kHoldNs = 50'000;

void EventTimer::start() {
  LOOM_CUDA_CHECK(launch_hold(kHoldNs, current_stream()));
  LOOM_CUDA_CHECK(cudaEventRecord(start_, current_stream()));
}

float EventTimer::stop_ms() {
  LOOM_CUDA_CHECK(cudaEventRecord(stop_, current_stream()));
  LOOM_CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
}

namespace {

struct L2Scratch {
  void* data = nullptr;
  size_t bytes = 0;
};

// The device's scratch, made at its first use; {nullptr, 0} where it cannot be.
L2Scratch l2_scratch(int device) {
  static std::mutex mutex;
  static std::map<int, L2Scratch> scratch;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = scratch.find(device); it != scratch.end()) return it->second;
  int l2_bytes = 0;
  LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  L2Scratch made{nullptr, 2 * static_cast<size_t>(l2_bytes)};
  if (made.bytes > 0 && cudaMalloc(&made.data, made.bytes) != cudaSuccess) {
    cudaGetLastError();  // out of memory: time without evicting rather than fail the race
    made = {};
  }
  scratch[device] = made;
  return made;
}

}  // namespace

void evict_l2() {
  LOOM_CHECK(!is_capturing(), ValueError,
             "[evict_l2] called inside a CUDA-graph capture; evict and time outside it");
  const L2Scratch scratch = l2_scratch(current_device());
  if (scratch.data == nullptr) return;
  LOOM_CUDA_CHECK(cudaMemsetAsync(scratch.data, 0, scratch.bytes, current_stream()));
}

}  // namespace loom::cuda
