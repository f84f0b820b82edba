// File: optim/train_step.cc
// Per input shape: warm-up eager steps, one capture, then replays. A capture
// runs the host half of the optimizer step first (prepare_step: step counts and
// scalars staged in device memory) and zero_grad, then records forward,
// backward and the device half (apply_step) on the current stream.
#include "optim/train_step.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "core/autocast.h"
#include "core/error.h"
#include "core/numerics.h"
#include "core/ops/fused.h"
#include "core/profiler.h"
#include "core/step_boundary.h"
#include "core/trace.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/allocator_purpose.h"
#include "core/cuda/graph.h"
#include "core/cuda/optim.h"
#include "core/cuda/stream.h"
#endif

namespace loom::optim {

namespace {

// What a graph is specialised on: the inputs' geometry and the numerics that
// chose its plans.
struct StepKey {
  Shape x_sizes, x_strides, y_sizes, y_strides;
  DType x_dtype = DType::Float32, y_dtype = DType::Int64;
  Device device;
  NumericsPolicy policy;
  std::optional<DType> autocast;

  bool operator==(const StepKey&) const = default;

  static StepKey of(const Tensor& x, const Tensor& y) {
    return {x.sizes(), x.strides(), y.sizes(), y.strides(), x.dtype(), y.dtype(), x.device(),
            numerics_policy(), autocast_dtype()};
  }
};

// Logs each distinct reason once per process, so a long run is not flooded.
void log_fallback(const std::string& reason) {
  static std::mutex mutex;
  static std::set<std::string> logged;
  std::lock_guard lock(mutex);
  if (logged.insert(reason).second) spdlog::warn("[TrainStep] running eagerly: {}", reason);
}

// How many times a step is captured again for its memory plan (core/capture_plan.h).
constexpr int kPlannedRecaptures = 3;

}  // namespace

struct TrainStep::Entry {
  StepKey key;
  int eager_steps = 0;
  std::string failure;  // why this shape cannot be captured ("" while it can)
#ifdef LOOM_WITH_CUDA
  std::unique_ptr<cuda::CudaGraph> graph;
#endif
  std::optional<fusion::TracedPlan> plan;  // the forward's chains, once traced
  bool plan_ran = false;       // an eager step ran the chains (their plans exist)
  bool trace_failed = false;   // a capture with the chains failed: untraced from then on
  Tensor x, y;                  // static inputs the graph reads
  std::vector<Tensor> outputs;  // static outputs it writes
  std::vector<Tensor> grads;    // the parameters' gradients it writes, by parameter
};

struct TrainStep::Graphs {
  std::vector<std::unique_ptr<Entry>> entries;
  uint64_t plan_generation = 0;  // step_boundary()'s generation the graphs were captured under
};

TrainStep::TrainStep(StepFunction fn, Optimizer& optimizer, TrainStepOptions options)
    : fn_(std::move(fn)), optimizer_(optimizer), options_(options),
      graphs_(std::make_unique<Graphs>()) {
  LOOM_CHECK(fn_ != nullptr, ValueError, "[TrainStep] the step function is empty");
  LOOM_CHECK(options_.warmup_steps >= 1 && options_.max_graphs >= 0, ValueError,
             "[TrainStep] warmup_steps must be >= 1 (plans and optimizer state are made "
             "eagerly) and max_graphs >= 0, got {} and {}",
             options_.warmup_steps, options_.max_graphs);
}

TrainStep::~TrainStep() = default;

void TrainStep::reset() { graphs_->entries.clear(); }

bool TrainStep::tracing(const Entry* entry) const {
  return entry != nullptr && options_.trace_fusion && !entry->trace_failed && fusion_enabled() &&
         !trace::active();
}

std::vector<Tensor> TrainStep::forward(Entry* entry, const Tensor& x, const Tensor& y) {
  if (!tracing(entry) || !entry->plan || entry->plan->empty()) return fn_(x, y);
  fusion::TracedRun run(*entry->plan);
  std::vector<Tensor> outputs = fn_(x, y);
  run.finish();
  return outputs;
}

const std::vector<Tensor>& TrainStep::eager(const Tensor& x, const Tensor& y, bool prepared, Entry* entry) {
  optimizer_.zero_grad();
  Entry* trace_into = tracing(entry) && !entry->plan ? entry : nullptr;
  if (trace_into != nullptr) {
    std::vector<trace::Op> ops;
    std::vector<Tensor> returned;
    {
      trace::Recorder recorder(trace::Keep::Shapes);  // the step's intermediates go as untraced
      outputs_ = fn_(x, y);
      ops = recorder.ops();
      for (const Tensor& t : outputs_) returned.push_back(recorder.recorded(t));
    }
    trace_into->plan = fusion::TracedPlan::from_trace(ops, returned);
    traced_plan_ = *trace_into->plan;
    fusion::note_traced_plan(fmt::format("TrainStep {} {}", shape_str(x.sizes()), dtype_name(x.dtype())),
                             traced_plan_);
  } else {
    outputs_ = forward(entry, x, y);
    if (tracing(entry) && entry->plan) entry->plan_ran = true;
  }
  LOOM_CHECK(!outputs_.empty() && outputs_.front().numel() == 1, ValueError,
             "[TrainStep] the step function must return the scalar loss first, got {}",
             outputs_.empty() ? std::string("no tensors") : shape_str(outputs_.front().sizes()));
  outputs_.front().backward();
  {
    ProfileScope scope("(optimizer)", ProfilePhase::Other, x.device());
    optimizer_step(outputs_.front(), prepared);
  }
  ++stats_.eager_steps;
  last_replayed_ = false;
  return outputs_;
}

void TrainStep::optimizer_step(const Tensor& loss, bool prepared) {
  if (!options_.skip_nonfinite) {
    prepared ? optimizer_.apply_step() : optimizer_.step();
    return;
  }
  if (!loss.device().is_cuda()) {  // the value is at hand: skip the whole step, host half too
    ++host_steps_;
    if (std::isfinite(loss.item())) {
      prepared ? optimizer_.apply_step() : optimizer_.step();
    } else {
      optimizer_.skip_step();  // the LR schedule stands still too
      if (host_nonfinite_.skipped++ == 0) host_nonfinite_.first = host_steps_;
    }
    return;
  }
#ifdef LOOM_WITH_CUDA
  Tensor guard = loss.detach();
  if (guard.dtype() != DType::Float32) guard = guard.to(DType::Float32);
  guard = guard.contiguous();
  if (!device_counts_.defined()) {  // eager warm-up steps come first: never inside a capture
    device_counts_ = zeros({3}, {.dtype = DType::Int64, .device = loss.device()});
  }
  if (!prepared) optimizer_.prepare_step();
  optimizer_.apply_step(guard);
  cuda::count_nonfinite(guard.data_ptr<float>(), device_counts_.data_ptr<int64_t>());
#endif
}

NonFiniteSteps TrainStep::nonfinite_steps() const {
  NonFiniteSteps out = host_nonfinite_;
  if (!device_counts_.defined()) return out;
  const std::vector<int64_t> counts = device_counts_.to_vector<int64_t>();
  if (out.first == 0) out.first = counts[2];
  out.skipped += counts[1];
  return out;
}

#ifdef LOOM_WITH_CUDA

namespace {

std::vector<Tensor*> all_params(Optimizer& optimizer) {
  std::vector<Tensor*> params;
  for (ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& p : group.params) params.push_back(&p);
  }
  return params;
}

}  // namespace

const std::vector<Tensor>& TrainStep::operator()(const Tensor& x, const Tensor& y) {
  DeviceGuard device(x.device());  // the step's stream, graph and kernels are x's GPU's
  auto fallback = [&](std::string reason) -> const std::vector<Tensor>& {
    fallback_reason_ = std::move(reason);
    log_fallback(fallback_reason_);
    return eager(x, y);
  };
  if (x.device().is_cuda()) apply_pending_plans();  // a step boundary, eager or not
  if (!x.device().is_cuda() || !y.device().is_cuda()) {  // the CPU's normal path: not logged
    fallback_reason_ = options_.cuda_graph
                           ? fmt::format("the inputs are on {} and {}; CUDA graphs need GPU tensors",
                                         x.device().str(), y.device().str())
                           : "CUDA graphs are off (TrainStepOptions::cuda_graph)";
    return eager(x, y);
  }
  Entry* entry = entry_for(x, y);
  if (!options_.cuda_graph) {  // the shape's steps still trace and run the chains, as captured ones do
    fallback_reason_ = "CUDA graphs are off (TrainStepOptions::cuda_graph)";
    return eager(x, y, /*prepared=*/false, entry);
  }
  if (entry == nullptr) {
    return fallback(fmt::format("more than max_graphs = {} input shapes; this one is {}", options_.max_graphs,
                                shape_str(x.sizes())));
  }
  const bool plan_not_run = tracing(entry) && entry->plan && !entry->plan->empty() && !entry->plan_ran;
  if (entry->eager_steps < options_.warmup_steps || plan_not_run) {
    ++entry->eager_steps;
    fallback_reason_.clear();
    return eager(x, y, /*prepared=*/false, entry);
  }
  if (!entry->failure.empty()) return fallback(entry->failure);
  if (!entry->graph) return capture(*entry, x, y);
  return replay(*entry, x, y);
}

TrainStep::Entry* TrainStep::entry_for(const Tensor& x, const Tensor& y) {
  const StepKey key = StepKey::of(x, y);
  for (auto& e : graphs_->entries) {
    if (e->key == key) return e.get();
  }
  if (static_cast<int>(graphs_->entries.size()) >= options_.max_graphs) return nullptr;
  graphs_->entries.push_back(std::make_unique<Entry>());
  graphs_->entries.back()->key = key;
  return graphs_->entries.back().get();
}

void TrainStep::apply_pending_plans() {
  const uint64_t generation = step_boundary();
  if (generation == graphs_->plan_generation) return;
  graphs_->plan_generation = generation;
  bool dropped = false;
  for (auto& e : graphs_->entries) {
    // One eager step with the new plans before any capture, captured or not
    // yet: the swap made every kernel race stale (kernel_choice.h), and a
    // capture cannot time one, so a shape captured right after the swap kept
    // the races run against the stand-ins (mobilenet_v2_cifar's depthwise
    // layers on Loom's kernels, 4.89 ms a step against 4.43, bf16, H200).
    e->eager_steps = std::min(e->eager_steps, options_.warmup_steps - 1);
    if (!e->graph) continue;
    e->graph.reset();  // waits for its queued replays
    e->x = e->y = Tensor();
    e->outputs.clear();
    e->grads.clear();
    dropped = true;
  }
  if (dropped) ++stats_.plan_swaps;
}

// A capture made without a memory plan (recorded only: never instantiated, never
// run), or one its plan did not fit, is made again at once with a plan from its
// own requests, a few times at most: past that, a plan that keeps missing is
// dropped and the step captured once more into its pool alone, so that no graph
// keeps both an arena and the pool's misses. Throws what CudaGraph::capture throws.
std::unique_ptr<cuda::CudaGraph> TrainStep::capture_planned(Entry& entry, std::vector<Tensor>& outputs) {
  enum class Kind { Record, Capture };
  const auto capture_once = [&](Kind kind, const std::optional<cuda::CapturePlan>& plan) {
    // The eager steps' gradients and parameter casts, or a discarded capture's,
    // go before the capture (the backward inside it makes new ones): freed
    // inside it, they would stay allocated for as long as the graph lives.
    optimizer_.zero_grad();
    clear_autocast_cache();
    outputs.clear();
    auto graph = std::make_unique<cuda::CudaGraph>();
    const auto step = [&] {
      outputs = forward(&entry, entry.x, entry.y);
      outputs.front().backward();
      optimizer_step(outputs.front(), /*prepared=*/true);
    };
    if (kind == Kind::Record) {
      graph->record(step);
    } else {
      graph->capture(step, plan);
    }
    ++stats_.captures;
    return graph;
  };
  std::unique_ptr<cuda::CudaGraph> graph = capture_once(Kind::Record, std::nullopt);
  for (int attempt = 0; attempt < kPlannedRecaptures; ++attempt) {
    std::optional<cuda::CapturePlan> plan(graph->memory_record());
    graph.reset();  // its pool goes back before the next capture takes memory
    graph = capture_once(Kind::Capture, plan);
    ++stats_.planned_captures;
    if (graph->plan_misses() == 0) return graph;
    ++stats_.missed_plans;
  }
  graph.reset();
  return capture_once(Kind::Capture, std::nullopt);  // a plan that keeps missing is dropped
}

const std::vector<Tensor>& TrainStep::capture(Entry& entry, const Tensor& x,
                                              const Tensor& y) {
  {
    // The graph's input slots live as long as it does: from the state pool, not
    // the holes of the eager steps' freed activations (core/cuda/allocator_purpose.h).
    const cuda::PurposeScope slots(cuda::Purpose::State);
    entry.x = x.clone();
    entry.y = y.clone();
  }
  optimizer_.prepare_step();
  std::unique_ptr<cuda::CudaGraph> graph;
  std::vector<Tensor> outputs;
  try {
    graph = capture_planned(entry, outputs);
  } catch (const Error& e) {
    const bool traced = tracing(&entry) && entry.plan && !entry.plan->empty();
    std::string reason = fmt::format("capturing the step{} failed: {}",
                                     traced ? " with its traced plan (chains as blocks, contiguous pools)" : "",
                                     e.what());
    if (traced) {  // the next step captures it as written
      entry.trace_failed = true;
      traced_plan_ = fusion::TracedPlan();
    } else {
      entry.failure = reason;
    }
    fallback_reason_ = reason;
    log_fallback(reason);
    entry.x = entry.y = Tensor();
    return eager(x, y, /*prepared=*/true);  // the host half of the optimizer step already ran
  }
  entry.graph = std::move(graph);
  entry.outputs = std::move(outputs);
  for (Tensor* p : all_params(optimizer_)) entry.grads.push_back(p->grad());
  return launch(entry);
}

const std::vector<Tensor>& TrainStep::replay(Entry& entry, const Tensor& x, const Tensor& y) {
  copy_all({entry.x, entry.y}, {x, y});  // one launch where both are dense
  // Another shape's graph may have run since: its gradients are not these.
  std::vector<Tensor*> params = all_params(optimizer_);
  for (size_t i = 0; i < params.size(); ++i) params[i]->set_grad(entry.grads[i]);
  optimizer_.prepare_step();
  return launch(entry);
}

const std::vector<Tensor>& TrainStep::launch(Entry& entry) {
  entry.graph->replay();
  ++stats_.replays;
  last_replayed_ = true;
  fallback_reason_.clear();
  outputs_ = entry.outputs;
  return outputs_;
}

#else  // no CUDA backend: every step is eager

const std::vector<Tensor>& TrainStep::operator()(const Tensor& x, const Tensor& y) {
  if (options_.cuda_graph) {
    fallback_reason_ = "this build of Loom has no CUDA backend";
    log_fallback(fallback_reason_);
  }
  return eager(x, y);
}

#endif

}  // namespace loom::optim
