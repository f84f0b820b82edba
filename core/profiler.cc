// File: core/profiler.cc
// Profile mode: rows, scopes timed by the steady clock or by cudaEvent pairs
// resolved lazily, and the report table.
#include "core/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/step_boundary.h"

#ifdef LOOM_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/allocator.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#endif

namespace loom {

namespace profiler_detail {
bool enabled = false;
}

namespace {

constexpr std::string_view kOtherRow = "(other)";

// A GPU scope whose events the host has not read yet.
struct PendingGpuTiming {
  ProfileRowId row;
  ProfilePhase phase;
  int device;
  CUevent_st* begin;
  CUevent_st* end;
};

struct ProfilerState {
  std::mutex mutex;
  std::vector<ProfileEntry> rows;
  std::unordered_map<std::string, ProfileRowId> by_name;
  std::vector<PendingGpuTiming> pending;
  std::map<int, std::vector<CUevent_st*>> free_events;  // by GPU; reused across scopes and runs
  bool used_gpu = false;
};

ProfilerState& state() {
  static ProfilerState* s = new ProfilerState;  // never destroyed: scopes may close at exit
  return *s;
}

thread_local std::optional<ProfileRowId> forward_row;

void add_time(ProfileEntry& entry, ProfilePhase phase, double ms) {
  switch (phase) {
    case ProfilePhase::Forward:
      entry.forward_ms += ms;
      ++entry.forward_calls;
      break;
    case ProfilePhase::Backward:
      entry.backward_ms += ms;
      ++entry.backward_calls;
      break;
    case ProfilePhase::Other:
      entry.other_ms += ms;
      ++entry.other_calls;
      break;
  }
}

#ifdef LOOM_WITH_CUDA
// An event from `device`'s pool, recorded on the calling thread's stream there.
// Caller holds the mutex.
CUevent_st* record_event(ProfilerState& s, int device) {
  cuda::DeviceGuard guard(device);  // an event belongs to the GPU it was made on
  std::vector<CUevent_st*>& pool = s.free_events[device];
  cudaEvent_t event;
  if (pool.empty()) {
    LOOM_CUDA_CHECK(cudaEventCreate(&event));
  } else {
    event = pool.back();
    pool.pop_back();
  }
  LOOM_CUDA_CHECK(cudaEventRecord(event, cuda::current_stream()));
  return event;
}

// Waits for every pending event pair and adds its time to its row. Caller holds the mutex.
void resolve_pending(ProfilerState& s) {
  for (const PendingGpuTiming& t : s.pending) {
    LOOM_CUDA_CHECK(cudaEventSynchronize(t.end));
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, t.begin, t.end));
    if (t.row < s.rows.size()) add_time(s.rows[t.row], t.phase, ms);
    s.free_events[t.device].push_back(t.begin);
    s.free_events[t.device].push_back(t.end);
  }
  s.pending.clear();
}

#else
void resolve_pending(ProfilerState&) {}
#endif

ProfileRowId find_or_add_row(ProfilerState& s, std::string_view name) {
  auto [it, inserted] = s.by_name.try_emplace(std::string(name), s.rows.size());
  if (inserted) s.rows.push_back({.name = std::string(name)});
  return it->second;
}

std::vector<ProfileEntry> with_shares(std::vector<ProfileEntry> rows) {
  double total = 0;
  for (const ProfileEntry& e : rows) total += e.total_ms();
  for (ProfileEntry& e : rows) e.share = total > 0 ? e.total_ms() / total : 0;
  return rows;
}

std::string entries_table(const std::vector<ProfileEntry>& rows, int64_t steps) {
  size_t width = 5;
  for (const ProfileEntry& e : rows) width = std::max(width, e.name.size());
  const double per_step = 1.0 / static_cast<double>(std::max<int64_t>(steps, 1));
  std::string out = fmt::format("{:<{}}  {:>9}  {:>9}  {:>9}  {:>9}  {:>6}\n", "layer", width,
                                "fwd ms", "bwd ms", "other ms", "total ms", "share");
  double total_ms = 0;
  for (const ProfileEntry& e : rows) {
    out += fmt::format("{:<{}}  {:>9.3f}  {:>9.3f}  {:>9.3f}  {:>9.3f}  {:>5.1f}%\n", e.name, width,
                       e.forward_ms * per_step, e.backward_ms * per_step, e.other_ms * per_step,
                       e.total_ms() * per_step, 100 * e.share);
    total_ms += e.total_ms();
  }
  out += fmt::format("{:<{}}  {:>9}  {:>9}  {:>9}  {:>9.3f}  {:>5.1f}%\n", "total", width, "", "",
                     "", total_ms * per_step, rows.empty() ? 0.0 : 100.0);
  return out;
}

std::string device_summary(bool used_gpu) {
#ifdef LOOM_WITH_CUDA
  if (!used_gpu) return "";
  const PlanSummary plans = plan_summary();
  const cuda::AllocatorStats memory = cuda::stats();
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt::format(
      "cuDNN plan cache: {} hits, {} misses, {} plans built ({:.2f} s building), {} unsupported, "
      "{} evictions\npeak GPU memory: {:.1f} MiB allocated, {:.1f} MiB reserved\n",
      plans.hits, plans.misses, plans.plans_built, plans.build_seconds, plans.unsupported,
      plans.evictions, memory.peak_allocated_bytes / kMiB, memory.peak_reserved_bytes / kMiB);
#else
  return "";
#endif
}

}  // namespace

void Profiler::start() {
  ProfilerState& s = state();
  {
    std::lock_guard lock(s.mutex);
    resolve_pending(s);  // returns the events of an earlier run to the pool
    s.rows.clear();
    s.by_name.clear();
    s.used_gpu = false;
  }
#ifdef LOOM_WITH_CUDA
  if (cuda::device_count() > 0) cuda::reset_peak_stats();
#endif
  profiler_detail::enabled = true;
}

void Profiler::stop() { profiler_detail::enabled = false; }

std::vector<ProfileEntry> Profiler::entries() {
  ProfilerState& s = state();
  std::lock_guard lock(s.mutex);
  resolve_pending(s);
  return with_shares(s.rows);
}

std::string Profiler::report(int64_t steps) {
  const std::vector<ProfileEntry> rows = entries();
  bool used_gpu = false;
  {
    ProfilerState& s = state();
    std::lock_guard lock(s.mutex);
    used_gpu = s.used_gpu;
  }
  return fmt::format("per-layer time per step over {} profiled step(s):\n{}{}", steps,
                     entries_table(rows, steps), device_summary(used_gpu));
}

ProfileRowId Profiler::row(std::string_view name) {
  ProfilerState& s = state();
  std::lock_guard lock(s.mutex);
  return find_or_add_row(s, name);
}

std::optional<ProfileRowId> Profiler::current_row() { return forward_row; }

ProfileRowId Profiler::other_row() { return row(kOtherRow); }

// --- scopes ---------------------------------------------------------------------------

ProfileScope::ProfileScope(std::string_view row, ProfilePhase phase, Device device)
    : phase_(phase) {
  if (Profiler::enabled()) open(Profiler::row(row), device);
}

ProfileScope::ProfileScope(ProfileRowId row, ProfilePhase phase, Device device) : phase_(phase) {
  if (Profiler::enabled()) open(row, device);
}

void ProfileScope::open(ProfileRowId row, Device device) {
  active_ = true;
  row_ = row;
  device_ = device;
  if (phase_ == ProfilePhase::Forward) {
    outer_row_ = forward_row;
    forward_row = row;
  }
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    DeviceGuard guard(device_);
    if (cuda::is_capturing()) return;  // events inside a graph cannot time a layer
    ProfilerState& s = state();
    std::lock_guard lock(s.mutex);
    s.used_gpu = true;
    begin_ = record_event(s, device_.index);
    timed_ = true;
    return;
  }
#endif
  timed_ = true;
  start_ = std::chrono::steady_clock::now();
}

ProfileScope::~ProfileScope() noexcept(false) {
  if (!active_) return;
  if (phase_ == ProfilePhase::Forward) forward_row = outer_row_;
  // While an exception unwinds the scope the timing is meaningless, and a
  // CUDA error thrown now would terminate the process.
  if (!timed_ || std::uncaught_exceptions() > 0) return;
  ProfilerState& s = state();
  std::lock_guard lock(s.mutex);
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    s.pending.push_back({row_, phase_, device_.index, begin_, record_event(s, device_.index)});
    return;
  }
#endif
  const std::chrono::duration<double, std::milli> elapsed =
      std::chrono::steady_clock::now() - start_;
  if (row_ < s.rows.size()) add_time(s.rows[row_], phase_, elapsed.count());
}

}  // namespace loom
