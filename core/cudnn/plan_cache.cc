// File: core/cudnn/plan_cache.cc
// The plan cache: lookups, misses turned into requests for the builder, and
// the swap of background results at a step boundary (plan_cache.h).
#include "core/cudnn/plan_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <unordered_set>

#include "core/cuda/kernel_choice.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/cudnn/context.h"
#include "core/cudnn/kernel_reuse.h"
#include "core/cudnn/plan_store.h"
#include "core/cudnn/tensor_spec.h"
#include "core/cudnn/variant_walk.h"
#include "core/error.h"
#include "core/step_boundary.h"

namespace loom::cudnn {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// LOOM_CUDNN_PLAN_CACHE_LIMIT, else 1024 entries.
size_t initial_capacity() {
  const char* limit = std::getenv("LOOM_CUDNN_PLAN_CACHE_LIMIT");
  return limit == nullptr ? 1024 : static_cast<size_t>(std::max(1L, std::atol(limit)));
}

bool same_kernel(const PlanNotes& a, const PlanNotes& b) {
  return a.engine_id == b.engine_id && a.knobs == b.knobs && a.dynamic_shape == b.dynamic_shape;
}

const char* made_event(const PlanBuilder::Made& made) {
  if (made.restored) return "restored";
  if (made.ticket != 0) return made.selection.plan ? "lazy" : "pending";
  return made.selection.plan ? "built" : "unsupported";
}

}  // namespace

PlanCache::PlanCache() : lru_(initial_capacity()) {}

// Never destroyed: its plans hold descriptors of cuDNN engine libraries that
// cuDNN loads on first use (often from a builder thread), whose own teardown
// at exit can run before a static cache's destructor; destroying the plans
// after it crashed the benchmark at exit on the H100.
PlanCache& PlanCache::global() {
  static PlanCache* cache = new PlanCache();
  return *cache;
}

std::shared_ptr<const Plan> PlanCache::get(const PlanKey& key, const Graph& graph, bool has_fallback,
                                           const VariantPointers* operands) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Entry* entry = lru_.find(key)) {
    log_.count(&PlanCacheStats::hits);
    ++entry->info.hits;
    if (!entry->plan && entry->info.pending) VariantWalk::note_pending();
    return entry->plan;
  }
  // The edge: what the build depends on is read here, once, for a miss only
  // (a hit, the common case, reads nothing).
  PlanRequest request = plan_request(key, graph, has_fallback);
  request.operands = operands;
  return miss(request);
}

std::shared_ptr<const Plan> PlanCache::miss(const PlanRequest& request) {
  // A variant above this one in the op's walk is pending: its swap makes this
  // key unneeded, so it is neither built nor cached (variant_walk.h).
  if (request.has_fallback && request.defer_misses) {
    log_.count(&PlanCacheStats::variants_deferred);
    return nullptr;
  }
  log_.count(&PlanCacheStats::misses);
  const Clock::time_point start = Clock::now();
  // Selection test-runs candidates and synchronizes, which a capturing stream
  // cannot do; the result would be a bogus "unsupported". A swap can bring keys
  // the eager step never met (the backward of a fused variant swapped in):
  // lazy mode runs those on the tier below and builds them in the background.
  if (request.capturing) {
    LOOM_CHECK(request.lazy && request.has_fallback, CudnnError,
               "[cudnn] the plan for {} does not exist yet and cannot be built while a CUDA graph "
               "is being captured; run the step once eagerly before capturing it",
               request.graph.pattern());
    VariantWalk::note_pending();
    return add_pending(request.key, request.graph, ms_since(start));
  }
  std::optional<StoredPlan> stored = PlanStore::global().load(request.key);
  // Reading the file is cheap; finalizing a runtime-compiled plan is not (20-30
  // ms on an H100, loading its kernels), and the test run's synchronisation
  // would wait for the step queued so far. A precompiled engine restores in a
  // few milliseconds, less than a first run on the tier below (the legacy conv
  // API's first call took 144 ms), so it restores here.
  if (stored && request.has_fallback && request.lazy && request.background_restore &&
      compiles_at_run_time(stored->notes)) {
    VariantWalk::note_pending();
    return add_pending(request.key, request.graph, ms_since(start), Pending::Restore);
  }
  PlanBuilder::Made made = builder_.make_now(request, stored);
  return store(request, std::move(made), ms_since(start));
}

std::shared_ptr<const Plan> PlanCache::store(const PlanRequest& request, PlanBuilder::Made made,
                                             double ms) {
  log_.add_build_ms(ms);
  const bool pending = made.ticket != 0;
  const char* event = made_event(made);
  Entry entry{.plan = std::move(made.selection.plan), .info = {}, .ticket = made.ticket};
  PlanInfo& info = entry.info;
  info.graph = request.graph.pattern();
  info.supported = entry.plan != nullptr || pending;
  info.build_ms = ms;
  info.restored = made.restored;
  info.pending = pending;
  info.candidates_seen = made.selection.candidates_seen;
  info.candidates_timed = made.selection.candidates_timed;
  info.why_unsupported = made.selection.why_none;
  if (pending) log_.count(&PlanCacheStats::lazy_plans);
  if (entry.plan) {  // a lazy stand-in counts as built
    log_.count(made.restored ? &PlanCacheStats::plans_restored : &PlanCacheStats::plans_built);
    info.notes = entry.plan->notes();
    info.workspace_bytes = entry.plan->workspace_bytes();
  } else if (!pending) {
    log_.count(&PlanCacheStats::unsupported);
  }
  if (made.restored) {
    log_.record_restore(event, info.graph, info.notes.engine_id, ms, made.restore_times);
  } else {
    log_.record(event, info.graph, info.notes.engine_id, ms, shape_detail(info.notes));
  }
  std::shared_ptr<const Plan> plan = lru_.insert(request.key, std::move(entry)).plan;
  evict_over_capacity();
  if (pending) builder_.queue(request.key, request.graph, made.ticket);
  if (pending && !plan) VariantWalk::note_pending();
  return plan;
}

std::shared_ptr<const Plan> PlanCache::add_pending(const PlanKey& key, const Graph& graph, double ms,
                                                  Pending why) {
  const bool restoring = why == Pending::Restore;
  Entry entry{.plan = nullptr, .info = {}, .ticket = builder_.next_ticket()};
  entry.info.graph = graph.pattern();
  entry.info.build_ms = ms;
  entry.info.restoring = restoring;
  entry.info.pending = true;
  log_.count(restoring ? &PlanCacheStats::restores_queued : &PlanCacheStats::lazy_plans);
  log_.record(restoring ? "restoring" : "pending", entry.info.graph, -1, ms);
  const uint64_t ticket = entry.ticket;
  lru_.insert(key, std::move(entry));
  evict_over_capacity();
  builder_.queue(key, graph, ticket);
  return nullptr;
}

bool PlanCache::pending_without_plan(const PlanKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Entry* entry = lru_.peek(key);
  return entry != nullptr && entry->info.pending && !entry->plan;
}

int PlanCache::apply_pending() {
  if (!builder_.any_finished() || cuda::is_capturing()) return 0;
  std::vector<PlanBuilder::Finished> finished = builder_.take_finished();
  std::lock_guard<std::mutex> lock(mutex_);
  int changed = 0, ended = 0;
  std::unordered_set<uint64_t> first_stages;      // swapped in by this call
  std::vector<PlanBuilder::Finished> later;       // their second stages: one swap per key per boundary
  for (PlanBuilder::Finished& f : finished) {
    Entry* entry = lru_.peek(f.key);
    if (entry == nullptr || entry->ticket != f.ticket) continue;  // evicted or cleared since
    if (first_stages.contains(f.ticket)) {
      later.push_back(std::move(f));
      continue;
    }
    if (f.first_stage) first_stages.insert(f.ticket);
    switch (swap_in(*entry, f)) {
      case Swap::Plan: ++changed; break;
      case Swap::Ended: ++ended; break;
      case Swap::None: break;
    }
  }
  builder_.put_back(std::move(later));
  if (changed > 0) cuda::forget_kernel_choices();  // races that ran against the stand-ins
  // A key that ends without a plan changes the step too: while it was pending,
  // its op's variant walk deferred the variants below it and ran the tier below
  // (unet's decoder batch norms on Loom's kernels, 28.0 ms a step against 11.8,
  // tf32, b512, H200). A captured step must re-capture so that the walk goes on.
  if (changed > 0 || ended > 0) ++generation_;
  return changed;
}

PlanCache::Swap PlanCache::swap_in(Entry& e, PlanBuilder::Finished& f) {
  if (f.first_stage) {  // the key stays pending for its static plan
    e.plan = std::move(f.plan);
    e.info.notes = e.plan->notes();
    e.info.workspace_bytes = e.plan->workspace_bytes();
    log_.record("swapped", e.info.graph, e.info.notes.engine_id, f.build_ms, shape_detail(e.info.notes));
    return Swap::Plan;
  }
  e.ticket = 0;
  e.info.pending = false;
  e.info.restoring = false;
  e.info.background_ms = f.build_ms;
  if (!f.plan) {
    if (e.plan) return Swap::None;  // the stand-in stays
    e.info.supported = false;
    e.info.why_unsupported = std::move(f.why_none);
    log_.count(&PlanCacheStats::unsupported);
    log_.record("unsupported", e.info.graph, -1, f.build_ms);
    return Swap::Ended;
  }
  if (e.plan && same_kernel(e.plan->notes(), f.plan->notes())) return Swap::None;
  e.plan = std::move(f.plan);
  e.info.notes = e.plan->notes();
  e.info.workspace_bytes = e.plan->workspace_bytes();
  (f.restored ? e.info.restored : e.info.specialized) = true;
  if (f.restored) {
    log_.count(&PlanCacheStats::plans_restored);
    log_.count(&PlanCacheStats::background_restores);
  } else {
    log_.count(&PlanCacheStats::plans_specialized);
  }
  log_.record("swapped", e.info.graph, e.info.notes.engine_id, f.build_ms);
  return Swap::Plan;
}

void PlanCache::wait_for_background_builds() { builder_.wait_idle(); }

size_t PlanCache::background_outstanding() const { return builder_.outstanding(); }

void PlanCache::record_warm_up(double ms) {
  log_.record("warm-up", "cuDNN libraries, handle, heuristics", -1, ms);
}

std::vector<PlanEvent> PlanCache::timeline() const { return log_.timeline(); }

std::string PlanCache::timeline_table() const { return log_.timeline_table(); }

void PlanCache::evict_over_capacity() {
  log_.count(&PlanCacheStats::evictions, static_cast<int64_t>(lru_.evict_over_capacity()));
}

std::string PlanCache::why_unsupported(const PlanKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Entry* entry = lru_.peek(key);
  return entry == nullptr ? "" : entry->info.why_unsupported;
}

void PlanCache::record_fallback(const PlanKey& key, std::string_view tier) {
  std::lock_guard<std::mutex> lock(mutex_);
  log_.count(&PlanCacheStats::fallback_runs);
  if (Entry* entry = lru_.peek(key); entry != nullptr && entry->info.fallback.empty()) {
    entry->info.fallback = tier;
  }
}

PlanCacheStats PlanCache::stats() const {
  PlanCacheStats out = log_.stats();
  const KernelReuseStats reuse = KernelReuse::global().stats();
  out.dynamic_plans = reuse.dynamic_plans;
  out.kernels_reused = reuse.kernels_reused;
  out.dynamic_refused = reuse.structures_refused;
  return out;
}

std::vector<PlanInfo> PlanCache::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PlanInfo> out;
  lru_.for_each([&out](const PlanKey&, const Entry& e) { out.push_back(e.info); });
  return out;
}

std::string PlanCache::explain() const { return explain_table(entries(), stats()); }

void PlanCache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  lru_.set_capacity(capacity);
  evict_over_capacity();
}

void PlanCache::clear() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lru_.clear();
    log_.clear();
  }
  builder_.clear();
  KernelReuse::global().clear();
}

namespace {

// run_plan for a key already made, so that run_plan_reporting makes it once.
bool run_keyed(PlanCache& cache, const PlanKey& key, const Graph& graph, const VariantPointers& pointers,
               std::string_view fallback_tier) {
  // Every caller copes with false: an empty tier means the caller tries its
  // next variant, and every chain of variants ends at a tier below cuDNN. So a
  // lazy key without a precompiled engine is never built while the step waits.
  std::shared_ptr<const Plan> plan = cache.get(key, graph, /*has_fallback=*/true, &pointers);
  if (!plan) {
    if (!fallback_tier.empty()) cache.record_fallback(key, fallback_tier);
    return false;
  }
  const Workspace workspace(static_cast<size_t>(plan->workspace_bytes()));
  plan->execute(handle(), pointers, workspace.get());
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

namespace {

// "engine 7, knobs TILE=2 STAGES=3, notes RUNTIME_COMPILATION, workspace 0 B" for a
// graph pattern's supported plan; "" when none.
std::string engine_of(const std::string& graph) {
  if (graph.empty()) return "";
  for (const PlanInfo& info : PlanCache::global().entries()) {
    if (info.graph != graph || !info.supported) continue;
    std::vector<std::string> notes = info.notes.numerical;
    notes.insert(notes.end(), info.notes.behavior.begin(), info.notes.behavior.end());
    return fmt::format("engine {}, knobs {}, notes {}, workspace {} B", info.notes.engine_id,
                       info.notes.knobs.empty() ? "-" : fmt::format("{}", fmt::join(info.notes.knobs, " ")),
                       notes.empty() ? "-" : fmt::format("{}", fmt::join(notes, " ")), info.workspace_bytes);
  }
  return "";
}

PlanSummary summary() {
  const PlanCacheStats s = PlanCache::global().stats();
  return PlanSummary{.hits = s.hits, .misses = s.misses, .plans_built = s.plans_built,
                     .plans_restored = s.plans_restored, .background_restores = s.background_restores,
                     .lazy_plans = s.lazy_plans, .plans_specialized = s.plans_specialized,
                     .kernels_reused = s.kernels_reused, .unsupported = s.unsupported,
                     .evictions = s.evictions, .build_seconds = s.build_seconds};
}

// The cache's part of step_boundary.h: linked into every program that runs a
// plan (run_plan lives here), and only there.
const bool step_boundary_hooked = [] {
  set_step_boundary_hook(StepBoundaryHook{
      .run = [] {
        PlanCache& cache = PlanCache::global();
        cache.apply_pending();
        return cache.generation();
      },
      .wait_for_background = [] {
        PlanCache& cache = PlanCache::global();
        cache.wait_for_background_builds();
        return cache.swaps_waiting();
      },
      .summary = &summary,
      .explain = [] { return PlanCache::global().explain(); },
      .timeline_table = [] {
        const PlanCache& cache = PlanCache::global();
        return cache.timeline().empty() ? std::string() : cache.timeline_table();
      },
      .engine_of = &engine_of});
  return true;
}();

}  // namespace

}  // namespace loom::cudnn
