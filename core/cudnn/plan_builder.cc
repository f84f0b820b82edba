// File: core/cudnn/plan_builder.cc
// The plan cache's builds, on the calling thread and on the background
// builders, and the builders' life: priming, exit, warm-up (plan_builder.h).
#include "core/cudnn/plan_builder.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <limits>
#include <mutex>
#include <string_view>

#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#include <dlfcn.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include "core/capture_gate.h"
#include "core/cuda/allocator.h"
#include "core/cuda/runtime.h"
#include "core/cudnn/build_queue.h"
#include "core/cudnn/context.h"
#include "core/cudnn/kernel_reuse.h"
#include "core/cudnn/plan_cache.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// At exit, stops the builders before whatever a running build uses is torn
// down: it finishes, queued ones are dropped. Exit handlers run in reverse
// order of registration, and libraries register theirs when first loaded:
// NVRTC and cuDNN's runtime-compiled engines are loaded by the first build
// that needs them, after the queue exists, and an exit that tore them down
// under a compile crashed (H100). So the hook is registered again after each
// build, which puts it ahead of every library that build loaded.
void stop_builders_at_exit();

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
// puts that teardown behind the hook, which waits for the running builds.
using NvrtcCreate = int (*)(void**, const char*, const char*, int, const char* const*, const char* const*);
using NvrtcCompile = int (*)(void*, int, const char* const*);
using NvrtcDestroy = int (*)(void**);

void prime_nvrtc() {
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
}

// Every background job primes first; std::call_once makes the others wait for it.
void prime_runtime_compilation() {
  static std::once_flag once;
  std::call_once(once, [] {
    prime_nvrtc();
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
  queue.retire();
}

// exit() destroys the exiting thread's thread_local objects before it runs any
// atexit handler, so a guard on the main thread stops the builders ahead of
// every library's teardown, including teardowns a running build registered
// after our hook: under a timed build cuDNN's matmul engines did (cuBLASLt
// state torn down under the build: a segfault in 8 of 8 exits of a short test
// on an H200), and priming cuBLASLt beforehand did not cover it. The atexit
// hooks stay for an exit called from another thread.
struct MainThreadExitGuard {
  MainThreadExitGuard() = default;
  MainThreadExitGuard(const MainThreadExitGuard&) = delete;
  MainThreadExitGuard& operator=(const MainThreadExitGuard&) = delete;
  ~MainThreadExitGuard() { stop_builders_at_exit(); }
};

// Called by every submitter; only the main thread's guard is made, since any
// other thread's would stop the builders when that thread ends.
void guard_main_thread_exit() {
  if (gettid() != getpid()) return;
  thread_local MainThreadExitGuard guard;
  (void)guard;
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
  (void)timeline_thread();  // the allocating (main) thread stays thread 0 of the timeline
  try {
    guard_main_thread_exit();
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

// A background build's selection: under the capture gate, timed
// (lazy_mode_times).
SelectOptions background_options(const PlanKey& key) {
  return {.policy = key.policy(), .gate = &capture_gate(), .timed = lazy_mode_times(key.policy())};
}

}  // namespace

PlanBuilder::Made PlanBuilder::make_now(const PlanRequest& request,
                                        const std::optional<StoredPlan>& stored) {
  Made made;
  // A lazy key built here (no stand-in and no tier below) is the background's
  // build made early: timed the same way.
  // Untimed, batch 512 took the heuristics' first engine for its large
  // layers: unet's 16-channel 64x64 weight gradients ran 1.4 ms each (bf16, H200).
  const SelectOptions options{.policy = request.key.policy(), .precompiled_only = request.precompiled_only,
                              .timed = request.lazy && lazy_mode_times(request.key.policy()),
                              .operands = request.operands};
  if (stored) {
    made.selection.plan = restore_plan(request.graph, handle(), stored->json, stored->notes, options,
                                       &made.restore_times);
    if (made.selection.plan) KernelReuse::global().note_static_plan(request.key, request.graph, stored->notes);
  }
  made.restored = made.selection.plan != nullptr;
  if (made.restored || (request.lazy && start_lazily(request, made))) return made;
  made.selection = select_static(request.key, request.graph, options);  // a stale file is replaced
  // A precompiled-only plan that passed a runtime-compiled one over is not the
  // best plan: saved, it would keep later lazy or eager runs from building that.
  if (made.selection.plan && made.selection.runtime_compiled_skipped == 0) {
    PlanStore::global().save(request.key, *made.selection.plan);
  }
  return made;
}

bool PlanBuilder::start_lazily(const PlanRequest& request, Made& made) {
  // The quick look costs a heuristics query (20-70 ms for a runtime-fusion
  // graph); resnet9's first step met 35 such keys of about ten structures.
  const std::string structure = structure_of(request.key, request.graph);
  bool skip_look = false;
  if (request.has_fallback) {
    std::lock_guard<std::mutex> lock(stand_in_mutex_);
    skip_look = without_stand_in_.contains(structure);
  }
  if (skip_look) {
    log_.count(&PlanCacheStats::stand_in_looks_skipped);
    made.ticket = next_ticket();
    return true;
  }
  const SelectOptions quick{.policy = request.key.policy(), .precompiled_only = true, .first_working = true,
                            .operands = request.operands};
  made.selection = select_plan(request.graph, handle(), quick);
  if (!made.selection.plan && made.selection.runtime_compiled_skipped > 0) {
    std::lock_guard<std::mutex> lock(stand_in_mutex_);
    without_stand_in_.insert(structure);
  }
  // Nothing runtime-compiled was passed over and nothing is timed: an
  // unrestricted selection ends at the same plan (or at none), so there is
  // nothing to build later.
  if (made.selection.runtime_compiled_skipped == 0 &&
      !selection_is_timed(request.graph, background_options(request.key))) {
    if (made.selection.plan) PlanStore::global().save(request.key, *made.selection.plan);
    return true;
  }
  if (!made.selection.plan && !request.has_fallback) return false;
  made.ticket = next_ticket();
  return true;
}

Selection PlanBuilder::select_static(const PlanKey& key, const Graph& graph, const SelectOptions& options) {
  Selection selection = select_plan(graph, handle(), options);
  if (selection.plan) KernelReuse::global().note_static_plan(key, graph, selection.plan->notes());
  return selection;
}

void PlanBuilder::queue(PlanKey key, Graph graph, uint64_t ticket) {
  guard_main_thread_exit();
  builders().submit(ticket, [this, key = std::move(key), graph = std::move(graph), ticket] {
    build(key, graph, ticket);
  });
}

void PlanBuilder::build(const PlanKey& key, const Graph& graph, uint64_t ticket) {
  prime_runtime_compilation();
  Clock::time_point start = Clock::now();
  Finished done{key, ticket, nullptr, "", 0};
  try {
    LOOM_CUDA_CHECK(cudaSetDevice(key.device()));
    const SelectOptions options = background_options(key);
    if (!restore_in_background(key, graph, options, start, done)) {  // no file, or a stale one: it is replaced
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
    log_.record("background", graph.pattern(), done.plan ? done.plan->notes().engine_id : -1, done.build_ms);
  }
  post(std::move(done));
}

bool PlanBuilder::restore_in_background(const PlanKey& key, const Graph& graph,
                                        const SelectOptions& options, Clock::time_point start,
                                        Finished& done) {
  std::optional<StoredPlan> stored = PlanStore::global().load(key);
  if (!stored) return false;
  RestoreTimes times;
  done.plan = restore_plan(graph, handle(), stored->json, stored->notes, options, &times);
  done.restored = done.plan != nullptr;
  if (done.restored) KernelReuse::global().note_static_plan(key, graph, stored->notes);
  log_.record_restore(done.restored ? "restored" : "not-restored", graph.pattern(),
                      done.restored ? done.plan->notes().engine_id : -1, ms_since(start), times);
  return done.restored;
}

bool PlanBuilder::build_first_stage(const PlanKey& key, const Graph& graph, uint64_t ticket,
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
  log_.record("background", graph.pattern(), first.plan->notes().engine_id, first.build_ms,
              shape_detail(first.plan->notes()));
  post(std::move(first));
  return true;
}

void PlanBuilder::post(Finished done) {
  log_.add_background(done.build_ms, done.restored);
  std::lock_guard<std::mutex> lock(finished_mutex_);
  finished_.push_back(std::move(done));
  any_finished_ = true;
}

std::vector<PlanBuilder::Finished> PlanBuilder::take_finished() {
  std::vector<Finished> finished;
  std::lock_guard<std::mutex> lock(finished_mutex_);
  finished.swap(finished_);
  any_finished_ = false;
  return finished;
}

void PlanBuilder::put_back(std::vector<Finished> later) {
  if (later.empty()) return;
  std::lock_guard<std::mutex> lock(finished_mutex_);
  finished_.insert(finished_.begin(), std::make_move_iterator(later.begin()),
                   std::make_move_iterator(later.end()));
  any_finished_ = true;
}

void PlanBuilder::wait_idle() {
  if (builders_made) builders().wait_idle();
}

size_t PlanBuilder::outstanding() const { return builders_made ? builders().outstanding() : 0; }

void PlanBuilder::clear() {
  {
    std::lock_guard<std::mutex> lock(stand_in_mutex_);
    without_stand_in_.clear();
  }
  std::lock_guard<std::mutex> lock(finished_mutex_);
  finished_.clear();
  any_finished_ = false;
}

}  // namespace loom::cudnn
