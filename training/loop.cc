// File: training/loop.cc
// The training run: the zoo model on the device (channels-last; fused on
// the GPU), the optimizer and schedule, TrainStep (CUDA graphs), the epochs
// with progress and metrics, evaluation, checkpoints, the profile window and
// the plan report. B batch, K classes.
#include "training/trainer.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <system_error>
#include <tuple>
#include <utility>

#include "core/anomaly.h"
#include "core/error.h"
#include "core/profiler.h"
#include "core/ops/ops.h"
#include "core/step_boundary.h"
#include "data/dataloader.h"
#include "layers/nn.h"
#include "models/registry.h"
#include "onnx/zoo.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
#include "optim/train_step.h"
#include "training/checkpoint.h"
#include "training/datasets.h"
#include "training/distributed.h"
#include "training/epoch_tally.h"
#include "training/metrics.h"
#include "training/plot.h"

namespace loom::training {

namespace {

constexpr int64_t kProfileWarmup = 5;  // steps before the profiled ones (plans built)

// The zoo model named c.model, which must take the dataset's images.
std::shared_ptr<nn::Module> make_model(const TrainConfig& c) {
  const models::ZooModel& row = models::zoo_model(c.model);
  LOOM_CHECK(row.dataset == c.dataset, ValueError, "[train] model {} trains on {} data, not {}", c.model,
             row.dataset, c.dataset);
  return row.build(row.num_classes);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params) {
  if (c.optimizer == "adam") {
    return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  }
  if (c.optimizer == "adamw") {
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  }
  if (c.optimizer == "rmsprop") {
    return std::make_unique<optim::RMSprop>(params, optim::RmspropOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  }
  if (c.optimizer == "adagrad") {
    return std::make_unique<optim::Adagrad>(params, optim::AdagradOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  }
  LOOM_CHECK(c.optimizer == "sgd", ValueError, "[train] unknown optimizer '{}' (adagrad, adam, adamw, rmsprop or sgd)",
             c.optimizer);
  return std::make_unique<optim::SGD>(params, optim::SgdOptions{.lr = c.lr,
                                                                .momentum = c.momentum,
                                                                .nesterov = c.momentum > 0,
                                                                .weight_decay = c.weight_decay});
}

std::unique_ptr<optim::LRScheduler> make_schedule(const TrainConfig& c, optim::Optimizer& opt,
                                                  int64_t steps_per_epoch) {
  const int64_t total = steps_per_epoch * c.epochs;
  if (c.schedule == "none") return nullptr;
  if (c.schedule == "step") return std::make_unique<optim::StepLR>(opt, 2 * steps_per_epoch, 0.5);
  if (c.schedule == "cosine") {
    return std::make_unique<optim::CosineAnnealingLR>(
        opt, optim::CosineAnnealingOptions{.total_steps = total, .warmup_steps = steps_per_epoch});
  }
  LOOM_CHECK(c.schedule == "onecycle", ValueError,
             "[train] unknown schedule '{}' (none, step, cosine or onecycle)", c.schedule);
  return std::make_unique<optim::OneCycleLR>(opt, optim::OneCycleOptions{.max_lr = c.lr, .total_steps = total});
}

// The test set's mean loss (the training criterion) and accuracy, read back once.
std::pair<double, double> evaluate(nn::Module& net, data::DataLoader& loader, const TrainConfig& c) {
  NoGradGuard no_grad;
  net.eval();
  loader.set_epoch(0);
  EpochTally tally(loader.size(), loader.options().batch_size, c.device);
  for (auto& [x, y] : loader) {
    Tensor logits = net(x);
    tally.add(cross_entropy(logits, y, {.label_smoothing = c.label_smoothing}), logits, y);
  }
  net.train();
  tally.read();
  return {tally.mean_loss(), tally.accuracy()};
}

struct Training {
  nn::Module& net;
  optim::Optimizer& opt;
  optim::LRScheduler* schedule;
  data::DataLoader& loader;
  optim::TrainStep& step;     // graphed on the GPU
  optim::TrainStep& profiled; // always eager, for the profile window
  int first_epoch = 0;        // epochs done before this run (after a resume)
  StartupPhases& startup;
};

// Steps skipped for a non-finite loss so far, and the 1-based number (in this
// run) of the first. The profiled steps are epoch 1's batches kProfileWarmup
// onwards, so the main TrainStep's later steps come after them.
optim::NonFiniteSteps nonfinite_so_far(const Training& t) {
  const optim::NonFiniteSteps main = t.step.nonfinite_steps();
  const optim::NonFiniteSteps profiled = t.profiled.nonfinite_steps();
  const int64_t profiled_steps = t.profiled.stats().eager_steps;
  auto in_run = [&](int64_t k) { return k <= kProfileWarmup ? k : k + profiled_steps; };
  optim::NonFiniteSteps out{.skipped = main.skipped + profiled.skipped};
  if (main.first > 0) out.first = in_run(main.first);
  if (profiled.first > 0 && (out.first == 0 || kProfileWarmup + profiled.first < out.first)) {
    out.first = kProfileWarmup + profiled.first;
  }
  return out;
}

[[noreturn]] void stop_on_nonfinite(const Training& t, const TrainConfig& c, int64_t step) {
  const int64_t per_epoch = std::max<int64_t>(t.loader.size(), 1);
  throw NonFiniteError(fmt::format(
      "[train] the loss was not finite (NaN or inf) at step {} of this run (epoch {}, batch {} "
      "of {}); its update was skipped and training stopped. Lower --lr (it is {}), check the "
      "data for NaN/inf and out-of-range labels, or pass --allow-nonfinite-loss to skip such "
      "steps and go on",
      step, t.first_epoch + (step - 1) / per_epoch + 1, (step - 1) % per_epoch + 1, per_epoch,
      c.lr));
}

// The step both TrainSteps run: logits, then the loss (timed as its own row).
optim::StepFunction step_function(nn::Module& net, const TrainConfig& c) {
  return [&net, smoothing = c.label_smoothing](const Tensor& x, const Tensor& y) {
    Tensor logits = net(x);
    ProfileScope scope("(loss)", ProfilePhase::Forward, x.device());
    return std::vector<Tensor>{cross_entropy(logits, y, {.label_smoothing = smoothing}), logits};
  };
}

bool profiling(const TrainConfig& c, int epoch, int64_t batch) {
  return c.profile_steps > 0 && epoch == 1 && batch >= kProfileWarmup &&
         batch < kProfileWarmup + c.profile_steps;
}

// Runs batch number `batch` (0-based) of the epoch, profiled when it is in the window.
const std::vector<Tensor>& run_step(Training& t, const TrainConfig& c, int epoch, int64_t batch,
                                    const Tensor& x, const Tensor& y) {
  if (!profiling(c, epoch, batch)) return t.step(x, y);
  if (batch == kProfileWarmup) Profiler::start();
  const std::vector<Tensor>& out = t.profiled(x, y);
  if (batch + 1 == kProfileWarmup + c.profile_steps || batch + 1 == t.loader.size()) {
    Profiler::stop();
    std::printf("\nprofile of %lld eager steps (epoch 1):\n%s", static_cast<long long>(batch + 1 - kProfileWarmup),
                Profiler::report(batch + 1 - kProfileWarmup).c_str());
  }
  return out;
}

EpochResult train_epoch(Training& t, int epoch, const TrainConfig& c) {
  auto start = std::chrono::steady_clock::now();
  EpochResult r{.epoch = epoch};
  const int64_t batches = t.loader.size();
  const int64_t skipped_before = nonfinite_so_far(t).skipped;
  EpochTally tally(batches, c.batch_size, c.device);
  Progress progress(c.progress, c.epochs, batches);
  int64_t batch = 0, images = 0;
  for (auto& [x, y] : t.loader) {
    const std::vector<Tensor>& out = run_step(t, c, epoch, batch, x, y);
    // The host's return, not the GPU's finish: waiting for the device here would
    // cost the run the overlap it measures.
    if (batch == 0 && epoch == t.first_epoch + 1) t.startup.mark("first step queued");
    if (t.schedule) t.schedule->step();
    tally.add(out[0], out[1], y);
    images += y.size(0);
    ++batch;
    // On the CPU a skip is known at once; on the GPU its count is read back
    // with the tally, every kSample batches and when progress is shown.
    const bool read = batch % kSample == 0 || batch == batches || progress.due(batch);
    if (!read && !(c.stop_on_nonfinite_loss && !x.device().is_cuda())) continue;
    const optim::NonFiniteSteps nonfinite = nonfinite_so_far(t);
    if (c.stop_on_nonfinite_loss && nonfinite.skipped > 0) stop_on_nonfinite(t, c, nonfinite.first);
    r.skipped_steps = nonfinite.skipped - skipped_before;
    if (!read) continue;
    tally.read();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.train_loss = tally.mean_loss();
    r.train_accuracy = tally.accuracy();
    r.images_per_second = static_cast<double>(images) / r.seconds;
    if (progress.due(batch)) progress.show(r, batch);
  }
  progress.finish();
  return r;
}

// --export-onnx: the trained weights in a fresh CPU copy of the zoo model,
// exported with a dynamic batch (onnx/zoo.h), whatever device and fusion trained it.
void export_trained(const TrainConfig& c, const nn::Module& net) {
  const onnx::ZooExport e = onnx::export_zoo_model(c.model, net.state_dict(), c.export_onnx, {.seed = c.seed});
  if (c.progress) {
    std::printf("exported %s to %s (ONNX opset %lld: %lld nodes, %.1f MB; input '%s', output '%s')\n",
                c.model.c_str(), c.export_onnx.c_str(), static_cast<long long>(onnx::kOpset),
                static_cast<long long>(e.summary.nodes), static_cast<double>(e.summary.file_bytes) / 1e6,
                e.summary.input_names.at(0).c_str(), e.summary.output_names.at(0).c_str());
  }
}

// Once per run: how the cuDNN plans came about, and their timeline in the file
// LOOM_CUDNN_PLAN_TIMELINE names (when set), followed by the start-up's phases
// so the two can be read side by side (the table counts from process start, the
// phases from the trainer's start). A run on the CPU still writes the file, with
// one line saying why it has no plans: a missing file reads as a fault.
void report_plans(const TrainConfig& c, const std::string& startup_line) {
  const char* path = std::getenv("LOOM_CUDNN_PLAN_TIMELINE");
  std::ofstream timeline;
  if (path != nullptr && *path != '\0') {
    timeline.open(path);
    LOOM_CHECK(timeline.is_open(), IoError, "[train] cannot write LOOM_CUDNN_PLAN_TIMELINE={}", path);
  }
  bool plans_reported = false;
  if (c.device.is_cuda()) {
    const PlanSummary s = plan_summary();
    if (c.progress) {
      std::printf("cuDNN plans (%s): %lld built, %lld restored from plan files (%lld in the "
                  "background), %lld started lazily, %lld specialized later, %lld reused a kernel "
                  "compiled for another batch size\n",
                  std::string(plan_build_mode_name(plan_build_mode())).c_str(),
                  static_cast<long long>(s.plans_built), static_cast<long long>(s.plans_restored),
                  static_cast<long long>(s.background_restores), static_cast<long long>(s.lazy_plans),
                  static_cast<long long>(s.plans_specialized), static_cast<long long>(s.kernels_reused));
    }
    if (timeline.is_open()) timeline << plan_timeline_table();
    plans_reported = true;
  }
  if (!timeline.is_open()) return;
  if (!plans_reported) timeline << "no cuDNN plans: the run was on the CPU\n";
  timeline << startup_line << "\n";
}

// Where --plot without --metrics keeps the run's metrics.
std::string temporary_metrics_path(const std::string& run_id) {
  std::error_code error;
  const std::filesystem::path folder = std::filesystem::temp_directory_path(error);
  LOOM_CHECK(!error, IoError,
             "[train] --plot keeps the metrics in a temporary file, but the temporary folder is "
             "unusable: {} (set TMPDIR to a folder, or pass --metrics FILE)",
             error.message());
  return (folder / fmt::format("loom_metrics_{}.csv", run_id)).string();
}

// The flags train_on checks before it loads anything; returns the --plot tool.
std::string check_config(const TrainConfig& c) {
  LOOM_CHECK(c.epochs >= 1 && c.batch_size >= 1, ValueError,
             "[train] epochs and batch size must be positive, got {} and {}", c.epochs, c.batch_size);
  LOOM_CHECK(c.target_accuracy >= 0 && c.target_accuracy <= 1 && c.profile_steps >= 0, ValueError,
             "[train] target accuracy must be in [0, 1] and profile steps >= 0, got {} and {}",
             c.target_accuracy, c.profile_steps);
  LOOM_CHECK(c.metrics.empty() || metrics_format_known(c.metrics), ValueError,
             "[train] the metrics file '{}' must end in .csv or .jsonl (the format follows it)",
             c.metrics);
  check_save(c);
  return check_plot(c);
}

// The zoo model on c.device: channels-last (cuDNN's native layout) and fused on
// the GPU as asked; fusing keeps the parameters and state_dict names.
std::shared_ptr<nn::Module> model_on_device(const TrainConfig& c) {
  std::shared_ptr<nn::Module> model = make_model(c);
  model->to(c.device);
  // cuDNN's native layout. The CPU stays NCHW: channels-last moves batch norm and pooling onto
  // oneDNN, but tools/train.sh's 5 epochs took 117.2 s channels-last against 107.3 s NCHW, back
  // to back on an idle 2-core machine (the step alone: 0.99x, medians of 5 interleaved runs).
  if (c.device.is_cuda()) model->to(MemoryFormat::ChannelsLast);
  if (c.fuse) nn::fuse(*model);  // unfused where cuDNN has no engine
  return model;
}

void print_start(const TrainConfig& c, const optim::Optimizer& opt, int64_t train_images, int start) {
  // The lr the optimizer holds: after a resume it is the checkpoint's, not --lr.
  const double lr = opt.param_groups().at(0).lr.value_or(c.lr);
  std::printf("%s on %s: %lld training images, batch %lld, %s lr %g, schedule %s, %s%s%s\n",
              c.model.c_str(), c.device.str().c_str(), static_cast<long long>(train_images),
              static_cast<long long>(c.batch_size), c.optimizer.c_str(), lr, c.schedule.c_str(),
              precision_shown(c).c_str(),
              c.detect_anomaly ? ", anomaly mode (eager steps, every op checked for NaN/inf)" : "",
              start > 0 ? fmt::format(", resumed after epoch {}", start).c_str() : "");
}

void print_epoch(const EpochResult& r) {
  std::printf("epoch %d: train loss %.4f, train accuracy %.4f, test loss %.4f, test accuracy %.4f, "
              "%.0f img/s, %.2f s (%.2f s since start)%s\n",
              r.epoch, r.train_loss, r.train_accuracy, r.test_loss, r.test_accuracy,
              r.images_per_second, r.seconds, r.elapsed_seconds,
              r.skipped_steps > 0
                  ? fmt::format(", {} steps skipped (non-finite loss)", r.skipped_steps).c_str()
                  : "");
  std::fflush(stdout);
}

// What the epochs read besides Training: the full training split (a rank
// reshards it every epoch), the test loader and the job's group (null alone).
struct EpochInputs {
  const data::Dataset& train_set;
  data::DataLoader& test_loader;
  const distributed::ProcessGroup* group;
  std::chrono::steady_clock::time_point began;
};

// The epochs from t.first_epoch on: train, evaluate, print, write the metrics
// row and the checkpoint; stops early at --target-accuracy; then the --plot.
void run_epochs(Training& t, const TrainConfig& c, const EpochInputs& in, const std::string& plot_tool,
                TrainResult& result) {
  const std::string run_id = new_run_id();
  // --plot draws from the metrics file: a temporary one when there is no --metrics.
  const std::string metrics_path =
      !c.metrics.empty() || c.plot.empty() ? c.metrics : temporary_metrics_path(run_id);
  TemporaryFile temporary_metrics(metrics_path == c.metrics ? "" : metrics_path);
  Metrics metrics(metrics_path, run_id, flags_text(c));
  for (int epoch = t.first_epoch; epoch < c.epochs; ++epoch) {
    if (in.group && epoch > 0) t.loader = make_loader(c, epoch_shard(in.train_set, c, *in.group, epoch), true);
    t.loader.set_epoch(epoch);
    EpochResult r = train_epoch(t, epoch + 1, c);
    if (in.group) r.images_per_second *= in.group->size();  // every rank steps in lockstep
    std::tie(r.test_loss, r.test_accuracy) = evaluate(t.net, in.test_loader, c);
    r.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - in.began).count();
    if (c.progress) print_epoch(r);
    metrics.write(r);
    result.epochs.push_back(r);
    if (!c.save.empty()) save_training(c, t.net, t.opt, t.schedule, epoch + 1);
    if (c.target_accuracy > 0 && r.test_accuracy >= c.target_accuracy) break;
  }
  if (!c.plot.empty()) draw_plot(c, plot_tool, metrics_path, run_id);
}

// The training run; `group` is null unless it is one rank of a data-parallel job.
TrainResult train_on(const TrainConfig& c, std::shared_ptr<distributed::ProcessGroup> group) {
  const auto began = std::chrono::steady_clock::now();
  const std::string plot_tool = check_config(c);
  PrecisionScope precision(c.precision, c.device, c.autotune);
  AnomalyGuard anomaly(c.detect_anomaly);
  manual_seed(c.seed);
  StartupPhases startup(began);
  std::future<Splits> loading = load_splits(c, startup);
  std::shared_ptr<nn::Module> model = model_on_device(c);
  nn::Module& net = *model;
  startup.mark("model on device");
  const Splits splits = loading.get();
  startup.mark_at("train split read", splits.train_read);
  startup.mark_at("test split read", splits.test_read);
  startup.mark("data in hand");
  data::DataLoader train_loader =
      make_loader(c, group ? epoch_shard(splits.train, c, *group, 0) : splits.train, /*training=*/true);
  data::DataLoader test_loader = make_loader(c, splits.test, /*training=*/false);
  startup.mark("loaders ready");
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (group) ddp = std::make_unique<nn::DistributedDataParallel>(model, group);
  nn::Module& stepped = ddp ? static_cast<nn::Module&>(*ddp) : net;  // DDP averages the gradients
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(c, net.parameters());
  std::unique_ptr<optim::LRScheduler> schedule = make_schedule(c, *opt, train_loader.size());
  // Anomaly mode reads every op's values back, which a captured graph cannot.
  optim::TrainStep step(step_function(stepped, c), *opt, {.cuda_graph = c.cuda_graph && !c.detect_anomaly});
  optim::TrainStep profiled(step_function(stepped, c), *opt, {.cuda_graph = false});
  startup.mark("optimizer and step ready");
  TrainResult result;
  Training t{net, *opt, schedule.get(), train_loader, step, profiled, 0, startup};
  t.first_epoch = c.resume.empty() ? 0 : resume_training(c, net, *opt, schedule.get(), result.warnings);
  if (t.first_epoch >= c.epochs) {
    // Exiting 0 in silence would read as a finished training run.
    std::printf("nothing to do: checkpoint is at epoch %d, --epochs %d%s\n", t.first_epoch, c.epochs,
                c.plot.empty() ? "" : " (so no --plot picture either)");
    result.model = net.state_dict();
    return result;
  }
  if (c.progress) print_start(c, *opt, splits.train.images.size(0), t.first_epoch);
  run_epochs(t, c, {splits.train, test_loader, group.get(), began}, plot_tool, result);
  if (!c.export_onnx.empty()) export_trained(c, net);
  if (c.progress) std::printf("%s\n", startup.line().c_str());
  report_plans(c, startup.line());
  result.model = net.state_dict();
  return result;
}

}  // namespace

TrainResult train(const TrainConfig& config) {
  if (!config.distributed) return train_on(config, nullptr);
  std::shared_ptr<distributed::ProcessGroup> group = join_job(config);
  return run_or_abort(*group, [&] { return train_on(rank_config(config, *group), group); });
}

}  // namespace loom::training
