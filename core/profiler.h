// File: core/profiler.h
// Profile mode: where a training step's time goes, per layer, as a table.
//
//   loom::Profiler::start();
//   for (int i = 0; i < 10; ++i) {
//     opt.zero_grad();
//     Tensor loss;
//     Tensor logits = net(x);  // each leaf module times its forward (layers/module.cc)
//     { loom::ProfileScope s("(loss)", loom::ProfilePhase::Forward, x.device());
//       loss = cross_entropy(logits, y); }
//     loss.backward();         // each autograd node's backward lands in its layer's row
//     { loom::ProfileScope s("(optimizer)", loom::ProfilePhase::Other, x.device());
//       opt.step(); }
//   }
//   loom::Profiler::stop();
//   std::cout << loom::Profiler::report(10);  // per-step ms, share, plan cache, peak memory
//
// Rows are named by whoever opens a scope: nn::Module names a leaf by its path
// and type ("3.a.0 Conv2d"). A forward scope also tags the autograd nodes
// recorded inside it, so their backward is timed into the same row; nodes
// recorded outside any scope go to "(other)".
//
// On the GPU a scope records a cudaEvent pair on the current stream; the pairs
// are resolved (the host waits for them) only by entries() and report(), so a
// profiled step is not serialised. Scopes opened while the stream is capturing
// a CUDA graph are not timed: profile eager steps. On the CPU a scope reads
// std::chrono::steady_clock.
//
// Disabled (the default), a scope site costs one branch on Profiler::enabled().
// Profiling is process-wide and meant for one training thread at a time.
#pragma once

#include "core/device.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct CUevent_st;  // what cudaEvent_t points to; no CUDA header needed here

namespace loom {

enum class ProfilePhase : uint8_t {
  Forward,   // a layer's forward (tags autograd nodes with the row)
  Backward,  // autograd nodes' backward
  Other,     // anything else in the step (the optimizer update)
};

// One row of the table; times are summed over the profiled window.
struct ProfileEntry {
  std::string name;
  double forward_ms = 0;
  double backward_ms = 0;
  double other_ms = 0;
  int64_t forward_calls = 0;
  int64_t backward_calls = 0;
  int64_t other_calls = 0;
  double share = 0;  // of the summed time of all rows, in [0, 1]

  double total_ms() const { return forward_ms + backward_ms + other_ms; }
};

// Identifies a row; rows live until the next start().
using ProfileRowId = uint32_t;

namespace profiler_detail {
extern bool enabled;
}

class Profiler {
 public:
  static bool enabled() { return profiler_detail::enabled; }
  // Forgets every row and previous timing, resets the GPU memory peak, and
  // starts profiling.
  static void start();
  // Stops opening new scopes; what was recorded stays for entries()/report().
  static void stop();

  // Rows in the order they were first used, "(other)" and "(optimizer)" like
  // any other; waits for the GPU events recorded so far.
  static std::vector<ProfileEntry> entries();
  // The per-layer table with times divided by `steps`, then the cuDNN plan
  // cache counters and the peak GPU memory (CUDA builds).
  static std::string report(int64_t steps = 1);

  // The row named `name`, made on first use.
  static ProfileRowId row(std::string_view name);
  // The row of the innermost open forward scope (autograd tags nodes with it).
  static std::optional<ProfileRowId> current_row();
  // The row for autograd nodes recorded outside any forward scope.
  static ProfileRowId other_row();
};

// Times its lifetime into one phase of a row, when profiling is enabled.
class ProfileScope {
 public:
  // `device` is where the timed work runs: a GPU's is timed by events on its stream.
  ProfileScope(std::string_view row, ProfilePhase phase, Device device);
  ProfileScope(ProfileRowId row, ProfilePhase phase, Device device);
  ~ProfileScope() noexcept(false);  // a failed cudaEventRecord throws CudaError
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  void open(ProfileRowId row, Device device);

  bool active_ = false;  // profiling was on when the scope opened
  bool timed_ = false;   // false while a CUDA graph is being captured
  Device device_;
  ProfileRowId row_ = 0;
  ProfilePhase phase_;
  std::optional<ProfileRowId> outer_row_;  // restored at the end of a forward scope
  std::chrono::steady_clock::time_point start_;
  CUevent_st* begin_ = nullptr;  // the start event on the GPU
};

}  // namespace loom
