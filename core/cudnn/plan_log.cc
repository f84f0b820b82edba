// File: core/cudnn/plan_log.cc
// The plan cache's counters, timeline and explain() table (plan_log.h).
#include "core/cudnn/plan_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "core/cuda/runtime.h"
#include "core/cudnn/context.h"
#include "core/cudnn/plan_store.h"
#include "core/numerics.h"

namespace loom::cudnn {

namespace {

using Clock = std::chrono::steady_clock;

// The timeline's zero: close enough to the process start for a cold-start story.
const Clock::time_point kProcessStart = Clock::now();

std::string restore_detail(const RestoreTimes& t) {
  return fmt::format("[graph {:.1f} + finalize {:.1f} + buffers {:.1f} + test run {:.1f} ms]",
                     t.graph_ms, t.finalize_ms, t.buffers_ms, t.test_ms);
}

void add_times(RestoreTimes& sum, const RestoreTimes& t) {
  sum.graph_ms += t.graph_ms;
  sum.finalize_ms += t.finalize_ms;
  sum.buffers_ms += t.buffers_ms;
  sum.test_ms += t.test_ms;
}

std::string counters_line(size_t entries, const PlanCacheStats& s) {
  return fmt::format(
      "cuDNN plan cache (cuDNN {}, plan-build mode {}): {} entries, {} hits, {} misses, {} plans "
      "built, {} restored from {} ({} of them by the builders; restores spent {:.1f} ms on graphs, "
      "{:.1f} ms finalizing, {:.1f} ms on test buffers, {:.1f} ms in test runs), {} unsupported, {} "
      "runs on the tier below cuDNN, {:.3f} s building; lazily: {} keys started on a stand-in, {} "
      "plans specialized later, {} background builds ({:.3f} s on the builders), {} lookups of "
      "lower variants deferred; {} dynamic-shape plans ({} reusing another size's kernel), {} "
      "structures without dynamic-shape engines\n",
      loaded_version(), plan_build_mode_name(plan_build_mode()), entries, s.hits, s.misses,
      s.plans_built, s.plans_restored,
      PlanStore::global().enabled() ? PlanStore::global().directory() : "(plan files off)",
      s.background_restores, s.restore_times.graph_ms, s.restore_times.finalize_ms,
      s.restore_times.buffers_ms, s.restore_times.test_ms, s.unsupported, s.fallback_runs,
      s.build_seconds, s.lazy_plans, s.plans_specialized, s.background_builds, s.background_seconds,
      s.variants_deferred, s.dynamic_plans, s.kernels_reused, s.dynamic_refused);
}

std::string entry_line(const PlanInfo& e) {
  if (!e.supported) {
    return fmt::format("{:<44} {:>7} {:>10} {:>9.1f} {:>6}  unsupported{}: {}\n", e.graph, "-", "-",
                       e.build_ms, e.hits,
                       e.fallback.empty() ? "" : fmt::format(", runs on {}", e.fallback),
                       e.why_unsupported);
  }
  if (e.notes.engine_id < 0) {  // pending, no stand-in plan
    return fmt::format("{:<44} {:>7} {:>10} {:>9.1f} {:>6}  PENDING: runs on {} until its plan is {}\n",
                       e.graph, "-", "-", e.build_ms, e.hits,
                       e.fallback.empty() ? "the tier below cuDNN" : e.fallback,
                       e.restoring ? "restored from its file" : "built");
  }
  std::vector<std::string> notes = e.notes.numerical;
  notes.insert(notes.end(), e.notes.behavior.begin(), e.notes.behavior.end());
  if (e.notes.dynamic_shape) notes.push_back(e.notes.kernel_reused ? "DYNAMIC_SHAPE(kernel reused)" : "DYNAMIC_SHAPE");
  if (e.restored) notes.push_back("RESTORED");
  if (e.pending) notes.push_back("LAZY");
  if (e.specialized) notes.push_back(fmt::format("SPECIALIZED({:.0f} ms)", e.background_ms));
  // The knobs with the engine id name the kernel configuration (two plans of one engine can differ in them).
  const std::string knobs = e.notes.knobs.empty() ? "" : fmt::format(" [{}]", fmt::join(e.notes.knobs, " "));
  return fmt::format("{:<44} {:>7} {:>10} {:>9.1f} {:>6}  {}{}\n", e.graph, e.notes.engine_id,
                     e.workspace_bytes, e.build_ms, e.hits,
                     notes.empty() ? "-" : fmt::format("{}", fmt::join(notes, ",")), knobs);
}

}  // namespace

// Small numbers, in the order threads first record an event.
int timeline_thread() {
  static std::atomic<int> next = 0;
  thread_local const int number = next++;
  return number;
}

void PlanLog::count(int64_t PlanCacheStats::*counter, int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.*counter += n;
}

void PlanLog::add_build_ms(double ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.build_seconds += ms / 1000.0;
}

void PlanLog::add_background(double ms, bool restored) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.background_seconds += ms / 1000.0;
  if (!restored) ++stats_.background_builds;
}

void PlanLog::record(std::string event, const std::string& graph, int64_t engine_id, double build_ms,
                     std::string detail) {
  PlanEvent e{.at_seconds = std::chrono::duration<double>(Clock::now() - kProcessStart).count(),
              .event = std::move(event), .graph = graph, .engine_id = engine_id,
              .build_ms = build_ms, .thread = timeline_thread(), .detail = std::move(detail)};
  std::lock_guard<std::mutex> lock(mutex_);
  timeline_.push_back(std::move(e));
}

void PlanLog::record_restore(const char* event, const std::string& graph, int64_t engine_id,
                             double ms, const RestoreTimes& times) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    add_times(stats_.restore_times, times);
  }
  record(event, graph, engine_id, ms, restore_detail(times));
}

PlanCacheStats PlanLog::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::vector<PlanEvent> PlanLog::timeline() const {
  std::vector<PlanEvent> events;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events = timeline_;
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const PlanEvent& a, const PlanEvent& b) { return a.at_seconds < b.at_seconds; });
  return events;
}

std::string PlanLog::timeline_table() const {
  std::string out = fmt::format("cuDNN plan timeline (plan-build mode {}, seconds since process start)\n",
                                plan_build_mode_name(plan_build_mode()));
  out += fmt::format("{:>9} {:>6}  {:<11} {:>7} {:>9}  {}\n", "at s", "thread", "event", "engine",
                     "build ms", "graph");
  for (const PlanEvent& e : timeline()) {
    out += fmt::format("{:>9.3f} {:>6}  {:<11} {:>7} {:>9.1f}  {}{}{}\n", e.at_seconds, e.thread,
                       e.event, e.engine_id < 0 ? std::string("-") : std::to_string(e.engine_id),
                       e.build_ms, e.graph, e.detail.empty() ? "" : " ", e.detail);
  }
  return out;
}

void PlanLog::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = {};
  timeline_.clear();
}

std::string shape_detail(const PlanNotes& notes) {
  if (!notes.dynamic_shape) return "";
  return notes.kernel_reused ? "[dynamic shape: kernel reused from another size]"
                             : "[dynamic shape: kernel compiled]";
}

std::string explain_table(const std::vector<PlanInfo>& entries, const PlanCacheStats& stats) {
  // Without a GPU (a CPU machine running a CUDA build), or when every op ran
  // elsewhere, a table of zeros would read as a fault: one line says why.
  if (entries.empty()) {
    return cuda::device_count() > 0 ? "no cuDNN plans: no op ran through cuDNN in this process\n"
                                    : "no cuDNN plans: no usable GPU, so every op ran on the CPU\n";
  }
  std::string out = counters_line(entries.size(), stats);
  out += fmt::format("{:<44} {:>7} {:>10} {:>9} {:>6}  {}\n", "graph", "engine", "workspace",
                     "build ms", "hits", "notes");
  for (const PlanInfo& e : entries) out += entry_line(e);
  return out;
}

}  // namespace loom::cudnn
