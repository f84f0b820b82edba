// File: core/cuda/kernel_choice.h
// Choosing between interchangeable implementations of one op (a cuDNN graph and
// a Loom kernel, say) by timing them on the shape at hand. Neither always wins:
// which is faster depends on layout, dtype and size, and is measured, not guessed.
//
// At the first meeting of a key, each candidate runs once to warm up (building
// plans, touching memory) and then kTimedRuns times, each run from an evicted
// L2 cache (evict_l2, core/cuda/event_timer.h) between CUDA events on the
// current stream, with the capture gate held (core/capture_gate.h)
// so that background plan builds' test runs stay off the GPU meanwhile; the
// candidate with the fastest single run is cached for the key (per device).
// Inside a CUDA-graph capture nothing is timed: an unknown key gets the first
// candidate, uncached. Under a deterministic numerics policy nothing is timed
// either (a race's winner may differ between runs): the first candidate runs,
// so every caller lists a deterministic one first (Loom's kernels are).
// forget_kernel_choices() makes every key race again at its next
// meeting outside a capture (until then the old choice stands): lazy plan
// building swaps better cuDNN plans in after the first races ran against the
// stand-ins. An environment variable (e.g. LOOM_POOL_KERNEL) read at every call
// forces a candidate by name, so that a benchmark can compare paths in one run
// and a test can run each path; "auto" or unset means time them. spdlog's
// debug level logs each race on one line (key, every candidate's time, winner), and each untimed pick.
//
//   static KernelChoice choice("LOOM_POOL_KERNEL");
//   std::string pick = choice.choose(key, {"loom", "cudnn"}, [&] {
//     return CandidateRuns{run_loom, run_cudnn};  // built only when a race runs
//   });
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace loom::cuda {

// The ways to run the op on scratch operands, one per candidate name; a run
// returns false when it cannot run the key (no engine, say), which removes it
// from the race.
using CandidateRuns = std::vector<std::function<bool()>>;

class KernelChoice {
 public:
  static constexpr int kTimedRuns = 3;

  explicit KernelChoice(std::string env_var);

  // The name of the candidate to run for `key`: the one the environment
  // variable forces (it must be one of `names`), else the cached or timed
  // fastest. make_runs (called only when a race runs) gives one run per name,
  // in order. Throws ValueError for an unknown forced name; when no candidate
  // can run, returns the first name (its caller's default path).
  std::string choose(const std::string& key, const std::vector<std::string>& names,
                     const std::function<CandidateRuns()>& make_runs);

  // The forced name, or "" for "auto" / unset.
  std::string forced() const;

 private:
  struct Race {
    std::string fastest;
    std::string times;  // "name 0.0412 ms, ..." in candidate order, for the log line
  };
  Race time_fastest(const std::vector<std::string>& names, const CandidateRuns& runs) const;

  struct Chosen {
    std::string name;
    uint64_t epoch = 0;  // the forget_kernel_choices() count when it was timed
  };

  std::string env_var_;
  std::mutex mutex_;
  std::map<std::string, Chosen> chosen_;  // device:key -> candidate
};

// Every KernelChoice times its keys again at their next meeting outside a
// capture: a candidate that runs a cuDNN plan may have become faster (a plan
// swap), so the cached winners may be stale.
void forget_kernel_choices();

}  // namespace loom::cuda
