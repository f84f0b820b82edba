// File: bench/stopwatch.cc
#include "bench/stopwatch.h"

#include "core/step_boundary.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#endif

namespace loom::bench {

Stopwatch::Stopwatch(Device device) : device_(device) {
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    LOOM_CUDA_CHECK(cudaEventCreate(&begin_));
    LOOM_CUDA_CHECK(cudaEventCreate(&end_));
  }
#endif
}

Stopwatch::~Stopwatch() {
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    cudaEventDestroy(begin_);
    cudaEventDestroy(end_);
  }
#endif
}

void Stopwatch::start() {
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    LOOM_CUDA_CHECK(cudaEventRecord(begin_, cuda::current_stream()));
    return;
  }
#endif
  start_ = std::chrono::steady_clock::now();
}

double Stopwatch::stop_ms() {
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    LOOM_CUDA_CHECK(cudaEventRecord(end_, cuda::current_stream()));
    LOOM_CUDA_CHECK(cudaEventSynchronize(end_));
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, begin_, end_));
    return ms;
  }
#endif
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
}

bool wait_for_background_plans(Device device) {
  return device.is_cuda() && loom::wait_for_background_plans();
}

bool settle_plans(Device device, const std::function<void()>& again) {
  for (int round = 0; round < kSettleRounds; ++round) {
    if (!wait_for_background_plans(device)) return true;
    again();
  }
  return !wait_for_background_plans(device);
}

}  // namespace loom::bench
