// File: core/cuda/event_timer.h
// Times GPU work on the current stream between two CUDA events, for choosing
// between candidates (cuDNN plans, kernel races). The caller holds
// gpu_timing_lock() (core/capture_gate.h) around its timed runs: the timer only
// measures, it does not decide who may time.
//
//   EventTimer timer;
//   evict_l2();                   // optional: time the run as a step meets it
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

  // Records the start event on the current stream, behind a short hold of the
  // stream (about 50 us), so the host's enqueueing of the timed work is not timed.
  void start();
  // Records the stop event, waits for it, and returns the milliseconds since
  // the last start(). A timer may be started and stopped again.
  float stop_ms();

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Overwrites the current device's L2 cache, on the current stream, with a
// scratch buffer twice its size (made once per device, outside the caching
// allocator; nothing is evicted where it cannot be made). A candidate timed
// again and again on the same operands finds them in L2, which inside a
// training step they have mostly left; timing from an evicted L2 ranks the
// candidates as the step does. Never inside a CUDA-graph capture.
void evict_l2();

}  // namespace loom::cuda
