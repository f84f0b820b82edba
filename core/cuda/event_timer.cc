// File: core/cuda/event_timer.cc
#include "core/cuda/event_timer.h"

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

void EventTimer::start() { LOOM_CUDA_CHECK(cudaEventRecord(start_, current_stream())); }

float EventTimer::stop_ms() {
  LOOM_CUDA_CHECK(cudaEventRecord(stop_, current_stream()));
  LOOM_CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
}

}  // namespace loom::cuda
