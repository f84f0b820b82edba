// File: core/cuda/event_timer.h
// Times GPU work on the current stream between two CUDA events, for choosing
// between candidates (cuDNN plans, kernel races). The caller holds
// gpu_timing_lock() (core/capture_gate.h) around its timed runs: the timer only
// measures, it does not decide who may time.
//
//   EventTimer timer;
//   timer.start();
//   run();                        // queued on current_stream()
//   float ms = timer.stop_ms();   // waits for run() to finish
#pragma once

#include <cuda_runtime_api.h>

namespace loom::cuda {

class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  // Records the start event on the current stream.
  void start();
  // Records the stop event, waits for it, and returns the milliseconds since
  // the last start(). A timer may be started and stopped again.
  float stop_ms();

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace loom::cuda
