// File: core/capture_gate.h
// Keeps work on other threads out of a CUDA-graph capture. A capture holds the
// gate exclusively (cuda::CudaGraph::capture); background work whose CUDA calls
// must not overlap one (the test runs of background cuDNN plan builds, which
// allocate scratch memory and synchronise) holds it shared, briefly.
//
// Writers first: a capture waiting for the gate keeps new shared holders out,
// so it waits only for the ones already inside (std::shared_mutex alone may let
// a stream of readers starve it).
//
//   { std::shared_lock hold(capture_gate()); run_the_test(); }
#pragma once

#include <mutex>
#include <shared_mutex>

namespace loom {

class CaptureGate {
 public:
  void lock() {
    std::lock_guard turn(turnstile_);
    gate_.lock();
  }
  bool try_lock() {
    std::unique_lock turn(turnstile_, std::try_to_lock);
    return turn.owns_lock() && gate_.try_lock();
  }
  void unlock() { gate_.unlock(); }
  void lock_shared() {
    { std::lock_guard turn(turnstile_); }  // waits while a capture is waiting or inside
    gate_.lock_shared();
  }
  bool try_lock_shared() {
    std::unique_lock turn(turnstile_, std::try_to_lock);
    return turn.owns_lock() && gate_.try_lock_shared();
  }
  void unlock_shared() { gate_.unlock_shared(); }

 private:
  std::mutex turnstile_;
  std::shared_mutex gate_;
};

// The process's one gate.
inline CaptureGate& capture_gate() {
  static CaptureGate gate;
  return gate;
}

// Held while a thread times GPU work to choose between candidates (cuDNN plan
// selection, kernel races): two threads timing at once slow each other's runs
// and pick wrong winners. Taken after the capture gate, never before it.
inline std::mutex& gpu_timing_lock() {
  static std::mutex lock;
  return lock;
}

}  // namespace loom
