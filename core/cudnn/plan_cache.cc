// File: core/cudnn/plan_cache.cc
// Graph -> cached plan: lookup, build modes, the plan files and the statistics.
#include "core/cudnn/plan_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_set>

#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include "core/capture_gate.h"
#include "core/cuda/allocator.h"
#include "core/cuda/kernel_choice.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/cudnn/build_queue.h"
#include "core/cudnn/context.h"
#include "core/cudnn/kernel_reuse.h"
#include "core/cudnn/plan_store.h"
#include "core/cudnn/tensor_spec.h"
#include "core/cudnn/variant_walk.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

using Clock = std::chrono::steady_clock;

// The timeline's zero: close enough to the process start for a cold-start story.
const Clock::time_point kProcessStart = Clock::now();

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Small numbers for the timeline, in the order threads first record an event.
int thread_number() {
  static std::atomic<int> next = 0;
  thread_local const int number = next++;
  return number;
}

bool builds_lazily(const NumericsPolicy& policy) {
  return plan_build_mode() == PlanBuildMode::Lazy && !policy.deterministic;
}

// LOOM_CUDNN_BACKGROUND_RESTORE=0 restores lazy mode's keys on the calling
// thread, as the other modes do: for comparing the two on one machine.
bool restores_in_background() {
  static const bool background = [] {
    const char* text = std::getenv("LOOM_CUDNN_BACKGROUND_RESTORE");
    return text == nullptr || std::string_view(text) != "0";
  }();
  return background;
}

std::string restore_detail(const RestoreTimes& t) {
  return fmt::format("[graph {:.1f} + finalize {:.1f} + buffers {:.1f} + test run {:.1f} ms]",
                     t.graph_ms, t.finalize_ms, t.buffers_ms, t.test_ms);
}

// The timeline's word on a plan built from a dynamic-shape graph (kernel_reuse.h).
std::string shape_detail(const PlanNotes& notes) {
  if (!notes.dynamic_shape) return "";
  return notes.kernel_reused ? "[dynamic shape: kernel reused from another size]"
                             : "[dynamic shape: kernel compiled]";
}

void add_times(RestoreTimes& sum, const RestoreTimes& t) {
  sum.graph_ms += t.graph_ms;
  sum.finalize_ms += t.finalize_ms;
  sum.buffers_ms += t.buffers_ms;
  sum.test_ms += t.test_ms;
}

// At exit, stops the builders before whatever a running build uses is torn
// down: it finishes, queued ones are dropped. Exit handlers run in reverse
// order of registration, and libraries register theirs when first loaded:
// NVRTC and cuDNN's runtime-compiled engines are loaded by the first build
// that needs them, after the queue exists, and an exit that tore them down
// under a compile crashed (H100). So the hook is registered again after each
// build, which puts it ahead of every library that build loaded.
void stop_builders_at_exit();

}  // namespace

std::string structure_of(const PlanKey& key, const Graph& graph) {
  std::string shape_free;
  int depth = 0;
  for (char c : graph.pattern()) {
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (depth == 0) {
      shape_free += c;
    }
  }
  std::string wiring;
  for (const Node& node : graph.nodes()) {
    wiring += '|';
    for (const auto& [port, uid] : node.ports) wiring += fmt::format("{}:{} ", static_cast<int>(port), uid);
  }
  return fmt::format("{} {}{} {} {}", key.device(), precision_name(key.policy().precision),
                     key.policy().deterministic ? " deterministic" : "", shape_free, wiring);
}

namespace {

// NVRTC of the CUDA major version Loom was built with, which cuDNN's runtime compilation uses.
std::string nvrtc_library() { return fmt::format("libnvrtc.so.{}", CUDART_VERSION / 1000); }

// The libraries runtime compilation loads, loaded now so that their exit
// handlers precede the first hook too (a name that does not resolve is skipped).
void load_runtime_compilation_libraries() {
  for (const std::string& name : {nvrtc_library(),
                                  fmt::format("libcudnn_engines_runtime_compiled.so.{}", CUDNN_MAJOR)}) {
    (void)dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
}

// NVRTC builds some of its state at its first compile, and registers that
// state's exit-time teardown then: after our exit hook, so it would run first,
// under a compile still running on a builder (on the H100 a builder crashed in
// nvrtcCompileProgram at exit whenever the driver's kernel cache was cold and
// builds ran long). One trivial compile, before the hook is registered again,
// puts that teardown behind the hook, which waits for the running builds. Every
// background job primes first; std::call_once makes the others wait for it.
using NvrtcCreate = int (*)(void**, const char*, const char*, int, const char* const*, const char* const*);
using NvrtcCompile = int (*)(void*, int, const char* const*);
using NvrtcDestroy = int (*)(void**);

void prime_runtime_compilation() {
  static std::once_flag once;
  std::call_once(once, [] {
    void* nvrtc = dlopen(nvrtc_library().c_str(), RTLD_NOW | RTLD_GLOBAL);
    auto symbol = [nvrtc](const char* symbol_name) { return nvrtc ? dlsym(nvrtc, symbol_name) : nullptr; };
    const auto create = reinterpret_cast<NvrtcCreate>(symbol("nvrtcCreateProgram"));
    const auto compile = reinterpret_cast<NvrtcCompile>(symbol("nvrtcCompileProgram"));
    const auto destroy = reinterpret_cast<NvrtcDestroy>(symbol("nvrtcDestroyProgram"));
    if (create && compile && destroy) {
      void* program = nullptr;
      if (create(&program, "extern \"C\" __global__ void loom_prime() {}", "loom_prime.cu", 0, nullptr,
                 nullptr) == 0) {
        (void)compile(program, 0, nullptr);  // its result does not matter, only that it ran
        (void)destroy(&program);
      }
    }
    std::atexit(stop_builders_at_exit);
  });
}

// Made at the first background build or warm-up, after CUDA is initialised,
// and never destroyed; its workers are not joined, so none of their
// thread-local state is destroyed during exit either.
std::atomic<bool> builders_made = false;
BuildQueue& builders() {
  static BuildQueue* const queue = [] {
    // Made before the hook is registered, so they outlive it.
    (void)capture_gate();
    (void)spdlog::default_logger_raw();
    load_runtime_compilation_libraries();
    auto* made = new BuildQueue(default_build_threads());
    std::atexit(stop_builders_at_exit);
    return made;
  }();
  builders_made = true;
  return *queue;
}

// Builds still queued or running at exit would take their plans with them, and
// the next process would build those keys again (a warm Fashion-MNIST run
// started 18 keys lazily: the tail batch's, the eval batch's, late swaps). So,
// with the plan files on, exit first lets them finish, for a bounded time.
constexpr std::chrono::seconds kExitWait{10};

void stop_builders_at_exit() {
  BuildQueue& queue = builders();
  const size_t outstanding = queue.outstanding();
  if (outstanding > 0 && PlanStore::global().enabled()) {
    spdlog::info("[cudnn] waiting up to {} s at exit for {} background plan builds, so that the "
                 "plan files hold their plans",
                 kExitWait.count(), outstanding);
    queue.wait_idle_for(kExitWait);
  }
  queue.stop();
}

// cuDNN's libraries the warm-up loads, loaded before the exit hook is
// registered again (see builders()): an exit during the warm-up then waits for
// it before tearing them down.
void load_cudnn_libraries() {
  for (const char* part : {"graph", "ops", "cnn", "heuristic", "engines_precompiled"}) {
    (void)dlopen(fmt::format("libcudnn_{}.so.{}", part, CUDNN_MAJOR).c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
}

// The builders' job id for a GPU's warm-up: counted down from the top, which
// plan-cache tickets (counted up from 1) never reach.
uint64_t warm_up_job(int device) {
  return std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(device);
}

// Lazy mode only: the other modes do no background work (tests that count
// allocations rely on that, tests/eager_plans.cc).
bool warm_up_wanted() {
  const char* text = std::getenv("LOOM_CUDNN_WARM_UP");
  const bool off = text != nullptr && std::string_view(text) == "0";
  return !off && plan_build_mode() == PlanBuildMode::Lazy;
}

// The hook of each GPU's first allocation (core/cuda/allocator.h): its CUDA
// context exists, and the model is usually still being built on the calling thread.
void warm_up_in_background(int device) {
  if (!warm_up_wanted()) return;
  (void)thread_number();  // the allocating (main) thread stays thread 0 of the timeline
  try {
    builders().submit(warm_up_job(device), [device] {
      prime_runtime_compilation();
      const auto start = Clock::now();
      load_cudnn_libraries();
      std::atexit(stop_builders_at_exit);
      warm_up(device);
      PlanCache::global().record_warm_up(ms_since(start));
    });
  } catch (const std::exception& e) {
    spdlog::debug("[cudnn] the warm-up was not started: {}", e.what());
  }
}

const bool warm_up_hooked = [] {
  cuda::set_first_allocation_hook(&warm_up_in_background);
  return true;
}();

bool same_kernel(const PlanNotes& a, const PlanNotes& b) {
  return a.engine_id == b.engine_id && a.knobs == b.knobs && a.dynamic_shape == b.dynamic_shape;
}

}  // namespace

PlanKey::PlanKey(const Graph& graph, const NumericsPolicy& policy, int device)
    : policy_(policy), device_(device) {
  values_.reserve(96);
  graph.append_canonical(values_);
  // FNV-1a over the policy, the device and the canonical form.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(static_cast<uint64_t>(policy.precision) | (uint64_t{policy.deterministic} << 8) |
      (uint64_t{policy.autotune} << 9));
  mix(static_cast<uint64_t>(device));
  for (int64_t v : values_) mix(static_cast<uint64_t>(v));
  hash_ = static_cast<size_t>(h);
}

bool PlanKey::operator==(const PlanKey& other) const {
  return hash_ == other.hash_ && policy_ == other.policy_ && device_ == other.device_ &&
         values_ == other.values_;
}

PlanCache::PlanCache() : capacity_(1024) {
  if (const char* limit = std::getenv("LOOM_CUDNN_PLAN_CACHE_LIMIT")) {
    capacity_ = static_cast<size_t>(std::max(1L, std::atol(limit)));
  }
}

// Never destroyed: its plans hold descriptors of cuDNN engine libraries that
// cuDNN loads on first use (often from a builder thread), whose own teardown
// at exit can run before a static cache's destructor; destroying the plans
// after it crashed the benchmark at exit on the H100.
PlanCache& PlanCache::global() {
  static PlanCache* cache = new PlanCache();
  return *cache;
}

std::shared_ptr<const Plan> PlanCache::get(const PlanKey& key, const Graph& graph, bool has_fallback) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    ++stats_.hits;
    ++it->second->info.hits;
    if (!it->second->plan && it->second->info.pending) VariantWalk::note_pending();
    return it->second->plan;
  }
  // A variant above this one in the op's walk is pending: its swap makes this
  // key unneeded, so it is neither built nor cached (variant_walk.h).
  if (has_fallback && VariantWalk::defers_misses()) {
    ++stats_.variants_deferred;
    return nullptr;
  }
  ++stats_.misses;
  const Clock::time_point start = Clock::now();
  std::string name = graph.pattern();
  // Selection test-runs candidates and synchronizes, which a capturing stream
  // cannot do; the result would be a bogus "unsupported". A swap can bring keys
  // the eager step never met (the backward of a fused variant swapped in):
  // lazy mode runs those on the tier below and builds them in the background.
  if (cuda::is_capturing()) {
    LOOM_CHECK(builds_lazily(key.policy()) && has_fallback, CudnnError,
               "[cudnn] the plan for {} does not exist yet and cannot be built while a CUDA graph "
               "is being captured; run the step once eagerly before capturing it",
               name);
    VariantWalk::note_pending();
    return add_pending(key, graph, std::move(name), ms_since(start));
  }
  const PlanStore& store = PlanStore::global();
  std::optional<StoredPlan> stored = store.load(key);
  // Reading the file is cheap; finalizing a runtime-compiled plan is not (20-30
  // ms on an H100, loading its kernels), and the test run's synchronisation
  // would wait for the step queued so far. A precompiled engine restores in a
  // few milliseconds, less than a first run on the tier below (the legacy conv
  // API's first call took 144 ms), so it restores here.
  if (stored && has_fallback && builds_lazily(key.policy()) && restores_in_background() &&
      compiles_at_run_time(stored->notes)) {
    VariantWalk::note_pending();
    return add_pending(key, graph, std::move(name), ms_since(start), Pending::Restore);
  }
  Selection selection;
  const SelectOptions options{.policy = key.policy(),
                              .precompiled_only = plan_build_mode() == PlanBuildMode::Precompiled};
  RestoreTimes restore_times;
  if (stored) {
    selection.plan = restore_plan(graph, handle(), stored->json, stored->notes, options, &restore_times);
    if (selection.plan) KernelReuse::global().note_static_plan(key, graph, stored->notes);
  }
  const bool restored = selection.plan != nullptr;
  uint64_t ticket = 0;
  if (!restored &&
      !(builds_lazily(key.policy()) && start_lazily(key, graph, has_fallback, selection, ticket))) {
    selection = select_static(key, graph, options);  // a stale file is replaced
    // A precompiled-only plan that passed a runtime-compiled one over is not the
    // best plan: saved, it would keep later lazy or eager runs from building that.
    if (selection.plan && selection.runtime_compiled_skipped == 0) store.save(key, *selection.plan);
  }
  const double ms = ms_since(start);
  stats_.build_seconds += ms / 1000.0;
  const bool pending = ticket != 0;
  PlanInfo info{.graph = name, .supported = selection.plan != nullptr || pending, .notes = {},
                .workspace_bytes = 0, .build_ms = ms, .restored = restored, .restoring = false,
                .pending = pending,
                .specialized = false, .background_ms = 0, .hits = 0,
                .candidates_seen = selection.candidates_seen, .why_unsupported = selection.why_none,
                .fallback = {}};
  if (pending) ++stats_.lazy_plans;
  if (selection.plan) {
    ++(restored ? stats_.plans_restored : stats_.plans_built);  // a lazy stand-in counts as built
    info.notes = selection.plan->notes();
    info.workspace_bytes = selection.plan->workspace_bytes();
    workspace(static_cast<size_t>(info.workspace_bytes));  // reserve now, outside any capture
  } else if (!pending) {
    ++stats_.unsupported;
  }
  const char* event = restored ? "restored"
                      : pending ? (selection.plan ? "lazy" : "pending")
                      : selection.plan ? "built"
                                       : "unsupported";
  if (restored) {
    record_restore(event, name, info.notes.engine_id, ms, restore_times);
  } else {
    record(event, name, info.notes.engine_id, ms, shape_detail(info.notes));
  }
  lru_.push_front(Entry{key, std::shared_ptr<const Plan>(std::move(selection.plan)), std::move(info), ticket});
  index_.emplace(key, lru_.begin());
  std::shared_ptr<const Plan> plan = lru_.front().plan;
  evict_over_capacity();
  if (pending) build_in_background(key, graph, ticket);
  if (pending && !plan) VariantWalk::note_pending();
  return plan;
}

std::shared_ptr<const Plan> PlanCache::add_pending(const PlanKey& key, const Graph& graph,
                                                  std::string name, double ms, Pending why) {
  const uint64_t ticket = next_ticket_++;
  const bool restoring = why == Pending::Restore;
  PlanInfo info{.graph = name, .supported = true, .notes = {}, .workspace_bytes = 0, .build_ms = ms,
                .restored = false, .restoring = restoring, .pending = true, .specialized = false,
                .background_ms = 0, .hits = 0, .candidates_seen = 0, .why_unsupported = {},
                .fallback = {}};
  ++(restoring ? stats_.restores_queued : stats_.lazy_plans);
  record(restoring ? "restoring" : "pending", name, -1, ms);
  lru_.push_front(Entry{key, nullptr, std::move(info), ticket});
  index_.emplace(key, lru_.begin());
  evict_over_capacity();
  build_in_background(key, graph, ticket);
  return nullptr;
}

void PlanCache::prefetch(const PlanKey& key, const Graph& graph) {
  if (!builds_lazily(key.policy())) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (index_.contains(key)) return;
  ++stats_.prefetched;
  (void)add_pending(key, graph, graph.pattern(), 0);
}

bool PlanCache::pending_without_plan(const PlanKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  return it != index_.end() && it->second->info.pending && !it->second->plan;
}

bool PlanCache::start_lazily(const PlanKey& key, const Graph& graph, bool has_fallback,
                             Selection& selection, uint64_t& ticket) {
  // The quick look costs a heuristics query (20-70 ms for a runtime-fusion
  // graph); resnet9's first step met 35 such keys of about ten structures.
  const std::string structure = structure_of(key, graph);
  if (has_fallback && without_stand_in_.contains(structure)) {
    ++stats_.stand_in_looks_skipped;
    ticket = next_ticket_++;
    return true;
  }
  const SelectOptions quick{.policy = key.policy(), .precompiled_only = true, .first_working = true};
  selection = select_plan(graph, handle(), quick);
  if (!selection.plan && selection.runtime_compiled_skipped > 0) without_stand_in_.insert(structure);
  // Nothing runtime-compiled was passed over and nothing is timed: an
  // unrestricted selection ends at the same plan (or at none), so there is
  // nothing to build later.
  if (selection.runtime_compiled_skipped == 0 && !selection_is_timed(graph, {.policy = key.policy()})) {
    if (selection.plan) PlanStore::global().save(key, *selection.plan);
    return true;
  }
  if (!selection.plan && !has_fallback) return false;
  ticket = next_ticket_++;
  return true;
}

Selection PlanCache::select_static(const PlanKey& key, const Graph& graph, const SelectOptions& options) {
  Selection selection = select_plan(graph, handle(), options);
  if (selection.plan) KernelReuse::global().note_static_plan(key, graph, selection.plan->notes());
  return selection;
}

void PlanCache::post(Finished done) {
  std::lock_guard<std::mutex> lock(finished_mutex_);
  background_seconds_ += done.build_ms / 1000.0;
  if (!done.restored) ++background_builds_;
  finished_.push_back(std::move(done));
  any_finished_ = true;
}

void PlanCache::build_in_background(PlanKey key, Graph graph, uint64_t ticket) {
  builders().submit(ticket, [this, key = std::move(key), graph = std::move(graph), ticket] {
    prime_runtime_compilation();
    Clock::time_point start = Clock::now();
    Finished done{key, ticket, nullptr, "", 0};
    try {
      LOOM_CUDA_CHECK(cudaSetDevice(key.device()));
      const SelectOptions options{.policy = key.policy(), .gate = &capture_gate()};
      if (std::optional<StoredPlan> stored = PlanStore::global().load(key)) {
        RestoreTimes times;
        done.plan = restore_plan(graph, handle(), stored->json, stored->notes, options, &times);
        done.restored = done.plan != nullptr;
        if (done.restored) KernelReuse::global().note_static_plan(key, graph, stored->notes);
        record_restore(done.restored ? "restored" : "not-restored", graph.pattern(),
                       done.restored ? done.plan->notes().engine_id : -1, ms_since(start), times);
      }
      if (!done.restored) {  // no file, or a stale one: it is replaced
        if (build_first_stage(key, graph, ticket, options)) start = Clock::now();
        Selection selection = select_static(key, graph, options);
        if (selection.plan) PlanStore::global().save(key, *selection.plan);
        done.why_none = selection.why_none;
        done.plan = std::move(selection.plan);
      }
    } catch (const std::exception& e) {  // reported like "no engine": the key keeps its stand-in
      done.why_none = fmt::format("the background build failed: {}", e.what());
    }
    done.build_ms = ms_since(start);
    std::atexit(stop_builders_at_exit);  // after the libraries this build loaded (see builders())
    if (!done.restored) {
      record("background", graph.pattern(), done.plan ? done.plan->notes().engine_id : -1, done.build_ms);
    }
    post(std::move(done));
  });
}

bool PlanCache::build_first_stage(const PlanKey& key, const Graph& graph, uint64_t ticket,
                                  const SelectOptions& options) {
  const Clock::time_point start = Clock::now();
  std::optional<Selection> dynamic;
  try {
    dynamic = KernelReuse::global().select_dynamic(key, graph, handle(), options);
  } catch (const std::exception& e) {  // the static plan is built all the same
    spdlog::debug("[cudnn] no dynamic-shape plan for {}: {}", graph.pattern(), e.what());
  }
  if (!dynamic) return false;
  Finished first{key, ticket, std::move(dynamic->plan), "", ms_since(start)};
  first.first_stage = true;
  record("background", graph.pattern(), first.plan->notes().engine_id, first.build_ms,
         shape_detail(first.plan->notes()));
  post(std::move(first));
  return true;
}

int PlanCache::apply_pending() {
  if (!any_finished_.load() || cuda::is_capturing()) return 0;
  std::vector<Finished> finished;
  {
    std::lock_guard<std::mutex> lock(finished_mutex_);
    finished.swap(finished_);
    any_finished_ = false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  int changed = 0;
  std::unordered_set<uint64_t> first_stages;  // swapped in by this call
  std::vector<Finished> later;                // their second stages: one swap per key per boundary
  for (Finished& f : finished) {
    auto it = index_.find(f.key);
    if (it == index_.end() || it->second->ticket != f.ticket) continue;  // evicted or cleared since
    if (first_stages.contains(f.ticket)) {
      later.push_back(std::move(f));
      continue;
    }
    Entry& e = *it->second;
    if (f.first_stage) {  // the key stays pending for its static plan
      first_stages.insert(f.ticket);
      e.plan = std::move(f.plan);
      e.info.notes = e.plan->notes();
      e.info.workspace_bytes = e.plan->workspace_bytes();
      workspace(static_cast<size_t>(e.info.workspace_bytes));
      ++changed;
      record("swapped", e.info.graph, e.info.notes.engine_id, f.build_ms, shape_detail(e.info.notes));
      continue;
    }
    e.ticket = 0;
    e.info.pending = false;
    e.info.restoring = false;
    e.info.background_ms = f.build_ms;
    if (!f.plan) {
      if (e.plan) continue;  // the stand-in stays
      e.info.supported = false;
      e.info.why_unsupported = std::move(f.why_none);
      ++stats_.unsupported;
      record("unsupported", e.info.graph, -1, f.build_ms);
      continue;
    }
    if (e.plan && same_kernel(e.plan->notes(), f.plan->notes())) continue;
    e.plan = std::move(f.plan);
    e.info.notes = e.plan->notes();
    e.info.workspace_bytes = e.plan->workspace_bytes();
    (f.restored ? e.info.restored : e.info.specialized) = true;
    workspace(static_cast<size_t>(e.info.workspace_bytes));
    if (f.restored) {
      ++stats_.plans_restored;
      ++stats_.background_restores;
    } else {
      ++stats_.plans_specialized;
    }
    ++changed;
    record("swapped", e.info.graph, e.info.notes.engine_id, f.build_ms);
  }
  if (!later.empty()) {
    std::lock_guard<std::mutex> finished_lock(finished_mutex_);
    finished_.insert(finished_.begin(), std::make_move_iterator(later.begin()),
                     std::make_move_iterator(later.end()));
    any_finished_ = true;
  }
  if (changed > 0) {
    ++generation_;
    cuda::forget_kernel_choices();  // races that ran against the stand-ins
  }
  return changed;
}

void PlanCache::wait_for_background_builds() {
  if (builders_made) builders().wait_idle();
}

size_t PlanCache::background_outstanding() const {
  return builders_made ? builders().outstanding() : 0;
}

void PlanCache::record_warm_up(double ms) { record("warm-up", "cuDNN libraries, handle, heuristics", -1, ms); }

void PlanCache::record_restore(const char* event, const std::string& graph, int64_t engine_id,
                               double ms, const RestoreTimes& times) {
  {
    std::lock_guard<std::mutex> lock(finished_mutex_);
    add_times(restore_times_, times);
  }
  record(event, graph, engine_id, ms, restore_detail(times));
}

void PlanCache::record(std::string event, const std::string& graph, int64_t engine_id, double build_ms,
                       std::string detail) {
  PlanEvent e{.at_seconds = std::chrono::duration<double>(Clock::now() - kProcessStart).count(),
              .event = std::move(event), .graph = graph, .engine_id = engine_id,
              .build_ms = build_ms, .thread = thread_number(), .detail = std::move(detail)};
  std::lock_guard<std::mutex> lock(timeline_mutex_);
  timeline_.push_back(std::move(e));
}

std::vector<PlanEvent> PlanCache::timeline() const {
  std::lock_guard<std::mutex> lock(timeline_mutex_);
  std::vector<PlanEvent> events = timeline_;
  std::stable_sort(events.begin(), events.end(),
                   [](const PlanEvent& a, const PlanEvent& b) { return a.at_seconds < b.at_seconds; });
  return events;
}

std::string PlanCache::timeline_table() const {
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

void PlanCache::evict_over_capacity() {
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
    ++stats_.evictions;
  }
}

std::string PlanCache::why_unsupported(const PlanKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  return it == index_.end() ? "" : it->second->info.why_unsupported;
}

void PlanCache::record_fallback(const PlanKey& key, std::string_view tier) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.fallback_runs;
  if (auto it = index_.find(key); it != index_.end() && it->second->info.fallback.empty()) {
    it->second->info.fallback = tier;
  }
}

PlanCacheStats PlanCache::stats() const {
  PlanCacheStats out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out = stats_;
  }
  const KernelReuseStats reuse = KernelReuse::global().stats();
  out.dynamic_plans = reuse.dynamic_plans;
  out.kernels_reused = reuse.kernels_reused;
  out.dynamic_refused = reuse.structures_refused;
  std::lock_guard<std::mutex> lock(finished_mutex_);
  out.background_seconds = background_seconds_;
  out.background_builds = background_builds_;
  out.restore_times = restore_times_;
  return out;
}

std::vector<PlanInfo> PlanCache::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PlanInfo> out;
  for (const Entry& e : lru_) out.push_back(e.info);
  return out;
}

std::string PlanCache::explain() const {
  // Without a GPU (a CPU machine running a CUDA build), or when every op ran
  // elsewhere, a table of zeros would read as a fault: one line says why.
  if (entries().empty()) {
    return cuda::device_count() > 0 ? "no cuDNN plans: no op ran through cuDNN in this process\n"
                                    : "no cuDNN plans: no usable GPU, so every op ran on the CPU\n";
  }
  PlanCacheStats s = stats();
  std::string out = fmt::format(
      "cuDNN plan cache (cuDNN {}, plan-build mode {}): {} entries, {} hits, {} misses, {} plans "
      "built, {} restored from {} ({} of them by the builders; restores spent {:.1f} ms on graphs, "
      "{:.1f} ms finalizing, {:.1f} ms on test buffers, {:.1f} ms in test runs), {} unsupported, {} "
      "runs on the tier below cuDNN, {:.3f} s building; lazily: {} keys started on a stand-in, {} "
      "plans specialized later, {} background builds ({:.3f} s on the builders), {} keys "
      "prefetched, {} lookups of lower variants deferred; {} dynamic-shape plans ({} reusing another "
      "size's kernel), {} structures without dynamic-shape engines\n",
      loaded_version(), plan_build_mode_name(plan_build_mode()), entries().size(), s.hits, s.misses,
      s.plans_built, s.plans_restored,
      PlanStore::global().enabled() ? PlanStore::global().directory() : "(plan files off)",
      s.background_restores, s.restore_times.graph_ms, s.restore_times.finalize_ms,
      s.restore_times.buffers_ms, s.restore_times.test_ms,
      s.unsupported, s.fallback_runs, s.build_seconds, s.lazy_plans, s.plans_specialized,
      s.background_builds, s.background_seconds, s.prefetched, s.variants_deferred, s.dynamic_plans,
      s.kernels_reused, s.dynamic_refused);
  out += fmt::format("{:<44} {:>7} {:>10} {:>9} {:>6}  {}\n", "graph", "engine", "workspace",
                     "build ms", "hits", "notes");
  for (const PlanInfo& e : entries()) {
    if (!e.supported) {
      out += fmt::format("{:<44} {:>7} {:>10} {:>9.1f} {:>6}  unsupported{}: {}\n", e.graph, "-", "-",
                         e.build_ms, e.hits,
                         e.fallback.empty() ? "" : fmt::format(", runs on {}", e.fallback),
                         e.why_unsupported);
      continue;
    }
    if (e.notes.engine_id < 0) {  // pending, no stand-in plan
      out += fmt::format("{:<44} {:>7} {:>10} {:>9.1f} {:>6}  PENDING: runs on {} until its plan is {}\n",
                         e.graph, "-", "-", e.build_ms, e.hits,
                         e.fallback.empty() ? "the tier below cuDNN" : e.fallback,
                         e.restoring ? "restored from its file" : "built");
      continue;
    }
    std::vector<std::string> notes = e.notes.numerical;
    notes.insert(notes.end(), e.notes.behavior.begin(), e.notes.behavior.end());
    if (e.notes.dynamic_shape) notes.push_back(e.notes.kernel_reused ? "DYNAMIC_SHAPE(kernel reused)" : "DYNAMIC_SHAPE");
    if (e.restored) notes.push_back("RESTORED");
    if (e.pending) notes.push_back("LAZY");
    if (e.specialized) notes.push_back(fmt::format("SPECIALIZED({:.0f} ms)", e.background_ms));
    out += fmt::format("{:<44} {:>7} {:>10} {:>9.1f} {:>6}  {}\n", e.graph, e.notes.engine_id,
                       e.workspace_bytes, e.build_ms, e.hits,
                       notes.empty() ? "-" : fmt::format("{}", fmt::join(notes, ",")));
  }
  return out;
}

void PlanCache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = std::max<size_t>(capacity, 1);
  evict_over_capacity();
}

void PlanCache::clear() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lru_.clear();
    index_.clear();
    without_stand_in_.clear();
    stats_ = {};
  }
  KernelReuse::global().clear();
  {
    std::lock_guard<std::mutex> lock(finished_mutex_);
    finished_.clear();
    any_finished_ = false;
    background_seconds_ = 0;
    background_builds_ = 0;
    restore_times_ = {};
  }
  std::lock_guard<std::mutex> lock(timeline_mutex_);
  timeline_.clear();
}

PlanKey plan_key(const Graph& graph) {
  return PlanKey(graph, numerics_policy(), cuda::current_device());
}

namespace {

// run_plan for a key already made, so that run_plan_reporting makes it once.
bool run_keyed(PlanCache& cache, const PlanKey& key, const Graph& graph, const VariantPointers& pointers,
               std::string_view fallback_tier) {
  // Every caller copes with false: an empty tier means the caller tries its
  // next variant, and every chain of variants ends at a tier below cuDNN. So a
  // lazy key without a precompiled engine is never built while the step waits.
  std::shared_ptr<const Plan> plan = cache.get(key, graph, /*has_fallback=*/true);
  if (!plan) {
    if (!fallback_tier.empty()) cache.record_fallback(key, fallback_tier);
    return false;
  }
  plan->execute(handle(), pointers, workspace(static_cast<size_t>(plan->workspace_bytes())));
  return true;
}

}  // namespace

bool run_plan(const Graph& graph, const VariantPointers& pointers, std::string_view fallback_tier) {
  if (!fully_aligned(graph)) return false;
  return run_keyed(PlanCache::global(), plan_key(graph), graph, pointers, fallback_tier);
}

PlanRun run_plan_reporting(const Graph& graph, const VariantPointers& pointers,
                           std::string_view fallback_tier) {
  if (!fully_aligned(graph)) return PlanRun::NoPlan;
  PlanCache& cache = PlanCache::global();
  const PlanKey key = plan_key(graph);
  if (run_keyed(cache, key, graph, pointers, fallback_tier)) return PlanRun::Ran;
  return cache.pending_without_plan(key) ? PlanRun::Pending : PlanRun::NoPlan;
}

int apply_pending_plans() { return PlanCache::global().apply_pending(); }

}  // namespace loom::cudnn
