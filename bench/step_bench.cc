// File: bench/step_bench.cc
// Times full training steps of the reference models, and the Fashion-MNIST
// time to accuracy, as bench/torch_bench.py does for PyTorch.
// N batch, C channels, H, W image size.
#include "bench/step_bench.h"

#include <fmt/format.h>
#include <spdlog/cfg/env.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>

#include "bench/options.h"
#include "bench/stopwatch.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/loss.h"
#include "core/profiler.h"
#include "core/step_boundary.h"
#include "core/tensor.h"
#include "distributed/ddp.h"
#include "training/trainer.h"
#include "layers/fused.h"
#include "models/registry.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "optim/train_step.h"

#ifdef LOOM_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "core/cuda/allocator.h"
#include "core/cuda/allocator_purpose.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#endif

namespace loom::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Taken at static initialisation, before main() and any CUDA or cuDNN call.
const Clock::time_point kProcessStart = Clock::now();

constexpr int kInputSets = 4;  // as torch_ref.py: the step never sees one batch twice in a row

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void synchronize(Device device) {
#ifdef LOOM_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize();
#endif
}

// Opens or closes the CUDA profiler's range around the timed repeats, so that
// `ncu --profile-from-start off` (or nsys's capture range) sees the steady
// state only, not plan building and its test runs. A no-op without a profiler.
void profiled_range(Device device, bool open) {
#ifdef LOOM_WITH_CUDA
  if (!device.is_cuda()) return;
  if (open) {
    LOOM_CUDA_CHECK(cudaProfilerStart());
  } else {
    LOOM_CUDA_CHECK(cudaProfilerStop());
  }
#else
  (void)device;
  (void)open;
#endif
}

// Sets the peaks to what is allocated now.
void reset_peak(Device device) {
#ifdef LOOM_WITH_CUDA
  if (device.is_cuda()) cuda::reset_peak_stats();
#else
  (void)device;
#endif
}

// Starts a configuration from an empty allocator cache, so its peak memory is
// its own. The plan cache is kept, as PyTorch keeps cudnn.benchmark's choices
// within a process: the first mode run of a shape pays for its plans.
void fresh_device_state(Device device) {
#ifdef LOOM_WITH_CUDA
  if (!device.is_cuda()) return;
  cuda::synchronize();
  cuda::empty_cache();
#endif
  reset_peak(device);
}

int64_t peak_allocated_bytes(Device device) {
#ifdef LOOM_WITH_CUDA
  if (device.is_cuda()) return static_cast<int64_t>(cuda::stats().peak_allocated_bytes);
#endif
  return 0;
}

// The most memory held from the driver since the last reset: live blocks, and the
// cached ones a step reuses (a replayed CUDA graph's intermediates live there).
int64_t peak_reserved_bytes(Device device) {
#ifdef LOOM_WITH_CUDA
  if (device.is_cuda()) return static_cast<int64_t>(cuda::stats().peak_reserved_bytes);
#endif
  return 0;
}

// What the peak held, by purpose (core/cuda/allocator_purpose.h): the live
// blocks at the moment of the peak, then each purpose's own high-water mark.
// Empty on the CPU.
std::string peak_breakdown(Device device) {
#ifdef LOOM_WITH_CUDA
  if (!device.is_cuda()) return "";
  const cuda::MemoryBreakdown m = cuda::memory_breakdown(device.index);
  auto row = [](const cuda::PurposeBytes& bytes) {
    std::string text;
    for (size_t i = 0; i < cuda::kPurposeCount; ++i) {
      const auto purpose = static_cast<cuda::Purpose>(i);
      text += fmt::format("{}{} {:.1f}", i == 0 ? "" : ", ", cuda::purpose_name(purpose),
                          static_cast<double>(bytes[purpose]) / (1024.0 * 1024.0));
    }
    return text;
  };
  return fmt::format("at the peak: {}; own peaks: {} (MiB)", row(m.at_peak), row(m.high_water));
#else
  (void)device;
  return "";
#endif
}

// Each pool's segments, reserved and allocated MiB and largest free block, one
// line: where the bytes reserved but not allocated sit. Empty on the CPU.
std::string pool_usage_line(Device device) {
#ifdef LOOM_WITH_CUDA
  if (!device.is_cuda()) return "";
  const auto mib = [](size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  std::string text;
  for (const cuda::NamedPoolUsage& pool : cuda::pool_usage(device.index)) {
    const cuda::PoolUsage& u = pool.usage;
    text += fmt::format("{}{}: {} segments, {:.1f} reserved, {:.1f} allocated, largest free {:.1f}",
                        text.empty() ? "" : "; ", pool.name, u.segments, mib(u.reserved_bytes),
                        mib(u.allocated_bytes), mib(u.largest_free_bytes));
  }
  return text + " (MiB)";
#else
  (void)device;
  return "";
#endif
}

std::unique_ptr<optim::Optimizer> make_optimizer(nn::Module& net, const std::string& name) {
  if (name == "adam") {
    return std::make_unique<optim::Adam>(net.parameters(), optim::AdamOptions{.lr = 1e-3});
  }
  return std::make_unique<optim::SGD>(
      net.parameters(), optim::SgdOptions{.lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4});
}

// The process's cuDNN plan counters, to report a configuration's share.
struct PlanCounts {
  int64_t built = 0, restored = 0, lazy = 0, specialized = 0;
};

PlanCounts plan_counts() {
  const PlanSummary s = plan_summary();
  return {s.plans_built, s.plans_restored, s.lazy_plans, s.plans_specialized};
}

struct InputSets {
  std::vector<Tensor> x;  // (N, C, H, W) each
  std::vector<Tensor> y;  // (N) int64 class indices, or (N, H, W) for a per-pixel model
};

InputSets make_inputs(const StepConfig& c) {
  Generator gen(1);
  const models::ZooModel& row = models::zoo_model(c.model);
  const Shape sizes = row.batch_shape(c.batch);
  const MemoryFormat format =
      c.layout == "nhwc" ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  InputSets sets;
  for (int i = 0; i < kInputSets; ++i) {
    sets.x.push_back(randn(sizes, {.device = c.device}, &gen).contiguous(format));
    sets.y.push_back(
        randint(0, row.num_classes, row.target_shape(c.batch), {.dtype = DType::Int64, .device = c.device}, &gen));
  }
  return sets;
}

// The first step (plan building), the warm-up, then the timed repeats.
void time_steps(nn::Module& net, optim::Optimizer& opt, const InputSets& data, const StepConfig& c,
                Clock::time_point built, StepResult& r) {
  optim::TrainStep step(
      [&net](const Tensor& x, const Tensor& y) {
        return std::vector<Tensor>{cross_entropy(net(x), y)};
      },
      opt, {.cuda_graph = c.mode.starts_with("graph"), .trace_fusion = c.mode == "graph-traced"});
  int64_t i = 0;
  auto run = [&] {
    step(data.x[i % kInputSets], data.y[i % kInputSets]);
    ++i;
  };
  run();
  synchronize(c.device);
  r.first_step_s = seconds_since(built);
  for (int w = 0; w < c.warmup; ++w) run();
  // The steady state is timed after specialization: each round swaps the
  // finished plans in (an eager step when that drops the graph), captures again,
  // and waits for what those steps met for the first time.
  r.plans_settled = settle_plans(c.device, [&] {
    run();
    run();
  });
  // A swap at the last round's second step leaves that step eager (one eager step
  // follows every swap): capture now, so that the capture's memory (its recording
  // pool) counts among the first steps' and not the timed steps' (resnet18_cifar
  // b512 tf32 on an H200: runs that made a third capture held 3,460 MiB in the
  // timed steps, about what the recording's caching pool holds; the others 2,548).
  for (int extra = 0; extra < kSettleRounds && c.mode.starts_with("graph") && !step.last_step_replayed(); ++extra) {
    run();
  }
  // The first steps' peak, then the timed steps' own: from an emptied cache and
  // one untimed step, which takes back what a step needs.
  synchronize(c.device);
  r.peak_bytes = peak_allocated_bytes(c.device);
  r.peak_breakdown = peak_breakdown(c.device);
  fresh_device_state(c.device);
  run();
  Stopwatch watch(c.device);
  profiled_range(c.device, true);
  for (int rep = 0; rep < c.repeats; ++rep) {
    watch.start();
    for (int s = 0; s < c.steps; ++s) run();
    r.repeat_ms.push_back(watch.stop_ms() / c.steps);
  }
  profiled_range(c.device, false);
  r.steady_peak_bytes = peak_reserved_bytes(c.device);
  if (const std::string by_purpose = peak_breakdown(c.device); !by_purpose.empty()) {
    r.steady_breakdown = fmt::format("{}; allocated peak {:.1f} MiB", by_purpose,
                                     static_cast<double>(peak_allocated_bytes(c.device)) / (1024.0 * 1024.0));
  }
  r.pools = pool_usage_line(c.device);
  r.captures = step.stats().captures;
  r.planned_captures = step.stats().planned_captures;
  r.missed_plans = step.stats().missed_plans;
  if (c.mode.starts_with("graph") && !step.last_step_replayed()) {
    r.fallback_reason = step.fallback_reason();
  }
}

// One eager data-parallel step, timed: when each bucket's all-reduce ran
// against the backward, and how much of it the step waited for.
void record_timeline(nn::DistributedDataParallel& ddp, optim::Optimizer& opt,
                     const InputSets& data, StepResult& r) {
  opt.zero_grad();
  cross_entropy(ddp(data.x[0]), data.y[0]).backward();
  opt.step();
  const nn::StepTimeline timeline = ddp.last_timeline();
  r.backward_ms = timeline.backward_ms;
  r.allreduce_done_ms = timeline.done_ms;
  for (const nn::BucketTiming& b : timeline.buckets) {
    r.bucket_start_ms.push_back(b.start_ms);
    r.bucket_end_ms.push_back(b.end_ms);
  }
}

// One evaluation-mode forward without autograd, as the trainers' test pass
// runs: its plans differ from training's (batch norm uses running statistics).
void eval_forward(nn::Module& net, const InputSets& data, const StepConfig& c) {
  NoGradGuard no_grad;
  net.eval();
  Tensor logits = net(data.x[0]);
  synchronize(c.device);
  // Lazy mode builds these keys in the background: waited for, so their plan
  // files are written before the process ends (tools/warm_plans.sh).
  (void)wait_for_background_plans(c.device);
  net.train();
}

// Eager steps with the profiler on (layer rows come from nn::Module and the
// autograd engine; the loss and the optimizer get rows here), then the table.
void profile_steps(nn::Module& net, optim::Optimizer& opt, const InputSets& data,
                   const StepConfig& c) {
  Profiler::start();
  Stopwatch watch(c.device);
  watch.start();
  for (int i = 0; i < c.profile_steps; ++i) {
    opt.zero_grad();
    Tensor logits = net(data.x[i % kInputSets]);
    Tensor loss;
    {
      ProfileScope scope("(loss)", ProfilePhase::Forward, c.device);
      loss = cross_entropy(logits, data.y[i % kInputSets]);
    }
    loss.backward();
    ProfileScope scope("(optimizer)", ProfilePhase::Other, c.device);
    opt.step();
  }
  const double step_ms = watch.stop_ms() / c.profile_steps;
  Profiler::stop();
  std::printf(
      "\n== profile: %s batch %lld %s %s, %d eager steps\n%sprofiled eager step: %.3f ms "
      "(wall, events included)\n\n",
      c.model.c_str(), static_cast<long long>(c.batch), c.precision.c_str(), c.layout.c_str(),
      c.profile_steps, Profiler::report(c.profile_steps).c_str(), step_ms);
}

}  // namespace

StepResult run_step_config(const StepConfig& c) {
  StepResult r{.model = c.model,
               .precision = c.precision,
               .mode = c.mode,
               .layout = c.layout,
               .device = c.device.str(),
               .batch = c.batch,
               .steps = c.steps,
               .repeats = c.repeats,
               .warmup = c.warmup};
  if (!c.plan_build.empty()) {
    std::optional<PlanBuildMode> mode = parse_plan_build_mode(c.plan_build);
    LOOM_CHECK(mode.has_value(), ValueError,
               "[bench] plan-build mode '{}' is not lazy, eager or precompiled", c.plan_build);
    set_plan_build_mode(*mode);
  }
  r.plan_build = plan_build_mode_name(plan_build_mode());
  static bool first_configuration = true;
  const Clock::time_point built = first_configuration ? kProcessStart : Clock::now();
  first_configuration = false;
  const PlanCounts before = plan_counts();
  training::PrecisionScope precision(c.precision, c.device, c.autotune);
  fresh_device_state(c.device);
  manual_seed(0);
  const models::ZooModel& row = models::zoo_model(c.model);
  std::shared_ptr<nn::Module> model = row.build(row.num_classes);
  nn::Module& net = *model;
  net.to(c.device);
  if (c.layout == "nhwc") net.to(MemoryFormat::ChannelsLast);
  // graph and eager run nn::fuse()d layers; graph-traced runs the model as written, as a user's TrainStep does,
  // and fuses by tracing alone.
  if (c.mode == "graph" || c.mode == "eager") nn::fuse(net);
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(net, c.optimizer);
  synchronize(c.device);
  r.model_ready_s = seconds_since(built);
  const InputSets data = make_inputs(c);
  synchronize(c.device);
  r.inputs_ready_s = seconds_since(built);
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (c.group) {
    ddp = std::make_unique<nn::DistributedDataParallel>(
        std::shared_ptr<nn::Module>(&net, [](nn::Module*) {}), c.group,
        nn::DistributedDataParallelOptions{.timeline = true});
    r.ranks = c.group->size();
  }
  time_steps(ddp ? static_cast<nn::Module&>(*ddp) : net, *opt, data, c, built, r);
  if (ddp) record_timeline(*ddp, *opt, data, r);
  if (c.eval_forward) eval_forward(net, data, c);
  const PlanCounts after = plan_counts();
  r.plans_built = after.built - before.built;
  r.plans_restored = after.restored - before.restored;
  r.plans_lazy = after.lazy - before.lazy;
  r.plans_specialized = after.specialized - before.specialized;
  if (const int64_t later = peak_allocated_bytes(c.device); later > r.peak_bytes) {  // the timed steps' or after
    r.peak_bytes = later;
    r.peak_breakdown = peak_breakdown(c.device);
  }
  if (c.profile_steps > 0) profile_steps(net, *opt, data, c);
  return r;
}

// --- time to accuracy -------------------------------------------------------------------

TtaResult run_time_to_accuracy(const std::string& dir, Device device, double target,
                                bool autotune) {
  training::TrainConfig config;
  config.data = dir;
  config.model = "mnist_net";
  config.epochs = 15;
  config.batch_size = 128;
  config.optimizer = "adam";
  config.lr = 1e-3;
  config.device = device;
  config.precision = "tf32";
  config.autotune = autotune;
  config.progress = false;
  config.target_accuracy = target;
  const Clock::time_point start = Clock::now();
  const training::TrainResult trained = training::train(config);
  TtaResult r{.target = target, .wall_seconds = seconds_since(start)};
  for (const training::EpochResult& epoch : trained.epochs)
    r.accuracies.push_back(epoch.test_accuracy);
  if (!trained.epochs.empty()) {
    r.epochs = static_cast<int>(trained.epochs.size());
    r.seconds = trained.epochs.back().elapsed_seconds;
    r.reached = trained.epochs.back().test_accuracy >= target;
  }
  return r;
}

// --- main ---------------------------------------------------------------------------------

namespace {

std::string resolve_layout(const BenchOptions& o, const std::string& precision) {
  (void)precision;
  if (o.layout != "auto") return o.layout;
  return o.device.is_cuda() ? "nhwc" : "nchw";
}

void print_step(const StepResult& r) {
  std::printf(
      "%-10s batch %4lld  %-6s %-5s %-4s %12.0f img/s %9.3f ms/step  first step %6.2f s"
      " (model %.2f, inputs %.2f)  peak %8.1f MiB (timed steps %.1f)  plans (%s): %lld built, "
      "%lld restored, %lld lazy, %lld specialized%s%s\n",
      r.model.c_str(), static_cast<long long>(r.batch), r.precision.c_str(), r.mode.c_str(),
      r.layout.c_str(), r.images_per_second(), r.ms_per_step(), r.first_step_s,
      r.model_ready_s, r.inputs_ready_s, static_cast<double>(r.peak_bytes) / (1024.0 * 1024.0),
      static_cast<double>(r.steady_peak_bytes) / (1024.0 * 1024.0), r.plan_build.c_str(),
      static_cast<long long>(r.plans_built), static_cast<long long>(r.plans_restored),
      static_cast<long long>(r.plans_lazy), static_cast<long long>(r.plans_specialized),
      r.fallback_reason.empty() ? "" : "  eager fallback: ", r.fallback_reason.c_str());
  if (!r.peak_breakdown.empty()) std::printf("  memory %s\n", r.peak_breakdown.c_str());
  if (!r.steady_breakdown.empty()) std::printf("  timed steps' memory %s\n", r.steady_breakdown.c_str());
  if (!r.pools.empty()) std::printf("  pools after the timed steps: %s\n", r.pools.c_str());
  if (!r.plans_settled) {
    std::printf("  plans still landing after %d rounds of swaps: the timed steps may include a swap and its capture\n",
                kSettleRounds);
  }
  if (r.captures > 0) {
    std::printf("  captures %lld: %lld into a planned arena, %lld of them missed requests\n",
                static_cast<long long>(r.captures), static_cast<long long>(r.planned_captures),
                static_cast<long long>(r.missed_plans));
  }
  if (r.ranks > 1) {
    std::printf("  %d ranks x batch %lld; one eager step: backward done %.3f ms after the "
                "forward, all-reduces done %.3f ms (exposed %.3f ms), %zu buckets:",
                r.ranks, static_cast<long long>(r.batch), r.backward_ms, r.allreduce_done_ms,
                r.allreduce_done_ms - r.backward_ms, r.bucket_start_ms.size());
    for (size_t b = 0; b < r.bucket_start_ms.size(); ++b) {
      std::printf(" [%.3f, %.3f]", r.bucket_start_ms[b], r.bucket_end_ms[b]);
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

void write_plan_timeline(const std::string& path) {
  if (path.empty()) return;
  std::ofstream out(path);
  LOOM_CHECK(out.is_open(), IoError, "[bench] cannot write --plan-timeline {}", path);
  // Without plans (no GPU, say) the report is one line saying why, and there
  // is no timeline table above it.
  if (const std::string table = plan_timeline_table(); !table.empty()) out << table << "\n";
  out << plan_report();
}

void run_all(const BenchOptions& o, const std::shared_ptr<distributed::ProcessGroup>& group,
             std::ofstream& json) {
  const bool reports = !group || group->rank() == 0;
  for (const std::string& model : o.models) {
    for (int64_t batch : o.batches) {
      for (const std::string& precision : o.precisions) {
        for (const std::string& mode : o.modes) {
          const StepResult r = run_step_config({.model = model,
                                                .batch = batch,
                                                .precision = precision,
                                                .mode = mode,
                                                .layout = resolve_layout(o, precision),
                                                .device = o.device,
                                                .steps = o.steps,
                                                .repeats = o.repeats,
                                                .warmup = o.warmup,
                                                .profile_steps = o.profile ? o.profile_steps : 0,
                                                .autotune = o.autotune,
                                                .optimizer = o.optimizer,
                                                .plan_build = o.plan_build,
                                                .eval_forward = o.eval_forward,
                                                .group = group});
          if (!reports) continue;
          print_step(r);
          if (json.is_open()) json << to_json(r) << std::endl;
        }
      }
    }
  }
  if (o.tta.empty()) return;
  if (!o.plan_build.empty()) set_plan_build_mode(*parse_plan_build_mode(o.plan_build));
  const TtaResult r = run_time_to_accuracy(o.tta, o.device, 0.91, o.autotune);
  std::printf(
      "Fashion-MNIST time to %.0f%%: %s after %d epochs, %.2f s (trainer clock), "
      "%.2f s (wall)\n",
      100 * r.target, r.reached ? "reached" : "NOT reached", r.epochs, r.seconds, r.wall_seconds);
  if (json.is_open()) json << to_json(r) << std::endl;
}

}  // namespace

int bench_main(int argc, char** argv) {
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug: each kernel race's times, plan-build notes
  BenchOptions options;
  try {
    options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const ValueError& e) {
    std::fprintf(stderr, "%s\n\n%s", e.what(), kUsage);
    return 2;
  }
  if (options.help) {
    std::printf("%s", kUsage);
    return 0;
  }
  try {
    LOOM_CHECK(!options.device.is_cuda() || cuda_available(), DeviceError,
               "[bench] --device cuda, but no usable GPU (this build has CUDA: {}); pass "
               "--device cpu",
               cuda_built());
    std::shared_ptr<distributed::ProcessGroup> group;
    if (options.distributed) {
      group = distributed::ProcessGroup::from_mpi();
      LOOM_CHECK(group->device().is_cuda(), DeviceError,
                 "[bench] --distributed trains on GPUs, and this rank has none");
      options.device = group->device();
    }
    std::ofstream json;
    if (!options.json.empty() && (!group || group->rank() == 0)) {
      json.open(options.json);
      LOOM_CHECK(json.is_open(), IoError, "[bench] cannot write --json {}", options.json);
    }
    run_all(options, group, json);
    write_plan_timeline(options.plan_timeline);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace loom::bench
