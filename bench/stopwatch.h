// File: bench/stopwatch.h
// Times queued work for the benchmarks: CUDA events on the current stream on
// the GPU (the host only waits in stop_ms), the steady clock on the CPU; and
// settle_plans, which lets lazily built cuDNN plans land before any timing.
//
//   Stopwatch watch(Device::cuda());
//   watch.start();
//   for (int i = 0; i < 20; ++i) step();
//   double ms = watch.stop_ms() / 20;
#pragma once

#include <chrono>
#include <functional>

#include "core/device.h"

#ifdef LOOM_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loom::bench {

class Stopwatch {
 public:
  explicit Stopwatch(Device device);
  ~Stopwatch();
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

  void start();
  // Milliseconds since start(), once the work queued since has finished.
  double stop_ms();

 private:
  Device device_;
  std::chrono::steady_clock::time_point start_;
#ifdef LOOM_WITH_CUDA
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
#endif
};

// Rounds of swap-and-rerun before timing. A variant walk goes down one variant
// a round when the upper ones end unsupported (unet's decoder batch norms:
// four), and a swap brings keys of its own; the loop stops as soon as nothing is
// waiting, and settle_plans says when this cap ended it instead.
constexpr int kSettleRounds = 32;

// Lets lazily started plans finish on a GPU; true when some finished and wait to
// be swapped in at the next step (a swap can bring keys of its own, built next).
// False at once on the CPU.
bool wait_for_background_plans(Device device);

// On a GPU, waits for the background plan builds and, while some finished,
// calls `again` (which swaps them in, as a step boundary does, and runs the
// work once more, meeting whatever keys the swap brings), at most kSettleRounds
// times. True when nothing is left waiting (at once on the CPU); false when
// plans still landed after the last round, so timing would meet a swap.
bool settle_plans(Device device, const std::function<void()>& again);

}  // namespace loom::bench
