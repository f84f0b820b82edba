// File: examples/common/trainer.cc
// B batch, K = 10 classes.
#include "examples/common/trainer.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <system_error>
#include <tuple>
#include <utility>

#include "core/anomaly.h"
#include "core/autocast.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/utf8.h"
#include "core/json.h"
#include "core/numerics.h"
#include "core/profiler.h"
#include "core/ops/ops.h"
#include "core/serialize.h"
#include "data/cifar.h"
#include "data/dataloader.h"
#include "data/idx.h"
#include "examples/common/distributed.h"
#include "examples/common/epoch_tally.h"
#include "layers/nn.h"
#include "optim/adam.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
#include "optim/train_step.h"

#ifdef LOOM_WITH_CUDA
#include "core/cudnn/plan_cache.h"
#endif

namespace loom::examples {

namespace {

// Train-set statistics, as the PyTorch reference normalizes.
const std::vector<double> kMnistMean = {0.2860}, kMnistStd = {0.3530};
const std::vector<double> kCifarMean = {0.4914, 0.4822, 0.4465}, kCifarStd = {0.2470, 0.2435, 0.2616};
constexpr int64_t kSample = 25;                  // read the epoch's tally back every kSample batches
constexpr int64_t kProfileWarmup = 5;            // steps before the profiled ones (plans built)
constexpr const char* kSchedulePrefix = "schedule.";

NumericsPolicy policy_of(const std::string& name, bool autotune) {
  LOOM_CHECK(name == "tf32" || name == "strict" || name == "bf16", ValueError,
             "[train] unknown precision '{}' (tf32, strict or bf16)", name);
  const Precision precision = name == "strict" ? Precision::StrictFp32
                              : name == "bf16" ? Precision::Bf16
                                               : Precision::Tf32;
  return {.precision = precision, .autotune = autotune};
}

// bf16 mixed precision is autocast on the GPU; the CPU computes in fp32.
std::optional<DType> autocast_of(const std::string& name, Device device) {
  if (name == "bf16" && device.is_cuda()) return DType::BFloat16;
  return std::nullopt;
}

nn::Sequential make_model(const std::string& name) {
  if (name == "lenet5") return nn::lenet5();
  if (name == "resnet9") return nn::resnet9();
  LOOM_CHECK(name == "mnist_net", ValueError, "[train] unknown model '{}' (mnist_net, lenet5 or resnet9)",
             name);
  return nn::mnist_net();
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params) {
  if (c.optimizer == "adam") {
    return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  }
  if (c.optimizer == "adamw") {
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  }
  LOOM_CHECK(c.optimizer == "sgd", ValueError, "[train] unknown optimizer '{}' (adam, adamw or sgd)",
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

constexpr const char* kMetricsColumns =
    "run_id,epoch,train_loss,train_accuracy,test_loss,test_accuracy,images_per_second,seconds,"
    "elapsed_seconds,flags";

// "20261124T001530Z-4242": the run's UTC start and the process id, so that rows
// of runs appended to one file stay apart.
std::string new_run_id() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  return fmt::format("{}-{}", stamp, static_cast<long>(::getpid()));
}

// A CSV field: quoted, with its quotes doubled (RFC 4180).
std::string csv_field(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

class Metrics {
 public:
  Metrics(const std::string& path, std::string run_id, std::string flags)
      : jsonl_(path.ends_with(".jsonl")), run_id_(std::move(run_id)), flags_(std::move(flags)) {
    LOOM_CHECK(path.empty() || metrics_format_known(path), ValueError,
               "[train] the metrics file '{}' must end in .csv or .jsonl (the format follows it)",
               path);
    if (path.empty()) return;
    // Reading a FIFO's header would block; rows are appended to regular files only.
    const std::filesystem::file_type type = path_type(path, "train");
    LOOM_CHECK(type == std::filesystem::file_type::regular ||
                   type == std::filesystem::file_type::not_found,
               IoError, "[train] --metrics {}: is {}, not a regular file; give a file name", path,
               file_type_name(type));
    if (!jsonl_) check_columns(path);
    errno = 0;
    out_.open(path, std::ios::app);
    const int error = errno;
    LOOM_CHECK(out_.is_open(), IoError, "[train] --metrics {}: cannot open the file for appending: {}",
               path, error != 0 ? std::generic_category().message(error) : "reason unknown");
    if (!jsonl_ && out_.tellp() == 0) out_ << kMetricsColumns << "\n";
  }

  void write(const EpochResult& r) {
    if (!out_.is_open()) return;
    if (jsonl_) {
      out_ << fmt::format(
          "{{\"run_id\": {}, \"epoch\": {}, \"train_loss\": {}, \"train_accuracy\": {}, "
          "\"test_loss\": {}, \"test_accuracy\": {}, \"images_per_second\": {}, \"seconds\": {}, "
          "\"elapsed_seconds\": {}, \"flags\": {}}}\n",
          json_string(run_id_), r.epoch, json_number(r.train_loss), json_number(r.train_accuracy),
          json_number(r.test_loss), json_number(r.test_accuracy), json_number(r.images_per_second), json_number(r.seconds),
          json_number(r.elapsed_seconds), json_string(flags_));
    } else {
      out_ << fmt::format("{},{},{},{},{},{},{},{},{},{}\n", run_id_, r.epoch, r.train_loss,
                          r.train_accuracy, r.test_loss, r.test_accuracy, r.images_per_second, r.seconds,
                          r.elapsed_seconds, csv_field(flags_));
    }
    out_.flush();
  }

 private:
  // Appending rows of other columns under an existing header would make a
  // file no reader parses.
  static void check_columns(const std::string& path) {
    std::ifstream in(path);
    std::string header;
    if (!in || !std::getline(in, header) || header.empty()) return;
    LOOM_CHECK(header == kMetricsColumns, IoError,
               "[train] --metrics {}: the file has other columns ('{}'), perhaps from an older "
               "Loom; runs append to a metrics file, so pass a new file name",
               path, header);
  }

  bool jsonl_;
  std::string run_id_, flags_;
  std::ofstream out_;
};

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

// Where the progress goes: a line redrawn in place with '\r' on a terminal;
// in a log file or pipe, one line per tenth of the epoch.
class Progress {
 public:
  Progress(bool on, int epochs, int64_t batches)
      : on_(on), terminal_(::isatty(::fileno(stderr)) == 1), epochs_(epochs), batches_(std::max<int64_t>(batches, 1)) {}

  // True when batch `batch` (1-based) of the epoch is one to show.
  bool due(int64_t batch) const {
    if (!on_) return false;
    if (terminal_) return batch % kSample == 0 || batch == batches_;
    return tenth(batch) > tenth(batch - 1);
  }

  void show(const EpochResult& r, int64_t batch) const {
    double eta = batch > 0 ? r.seconds * static_cast<double>(batches_ - batch) / static_cast<double>(batch) : 0;
    if (terminal_) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(kWidth * batch / batches_);
      std::fprintf(stderr, "\repoch %d/%d [%-*s] %lld/%lld loss %.4f acc %.3f %.0f img/s ETA %.0fs   ",
                   r.epoch, epochs_, kWidth, std::string(filled, '=').c_str(),
                   static_cast<long long>(batch), static_cast<long long>(batches_), r.train_loss,
                   r.train_accuracy, r.images_per_second, eta);
    } else {
      std::fprintf(stderr, "epoch %d/%d %3lld%% %lld/%lld loss %.4f acc %.3f %.0f img/s ETA %.0fs\n",
                   r.epoch, epochs_, static_cast<long long>(100 * batch / batches_),
                   static_cast<long long>(batch), static_cast<long long>(batches_), r.train_loss,
                   r.train_accuracy, r.images_per_second, eta);
    }
  }

  void finish() const {
    if (on_ && terminal_) std::fprintf(stderr, "\n");
  }

 private:
  int64_t tenth(int64_t batch) const { return 10 * batch / batches_; }

  bool on_, terminal_;
  int epochs_;
  int64_t batches_;
};

// The start-up's milestones in seconds on the trainer's clock (the "since
// start" of the epoch lines), so a run shows which phase before the first step
// is its critical path. The data thread's milestones come back with the splits.
class StartupPhases {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StartupPhases(Clock::time_point began) : began_(began) {}

  double seconds() const { return std::chrono::duration<double>(Clock::now() - began_).count(); }
  void mark(const char* phase) { mark_at(phase, seconds()); }
  void mark_at(const char* phase, double at) { phases_.push_back({phase, at}); }

  // "start-up (s since start): model on device 0.15, ..., first step queued 0.43",
  // phases in the order they were marked (the data thread's come back together).
  std::string line() const {
    std::string text = "start-up (s since start):";
    for (size_t i = 0; i < phases_.size(); ++i) {
      text += fmt::format("{} {} {:.3f}", i == 0 ? "" : ",", phases_[i].name, phases_[i].at);
    }
    return text;
  }

 private:
  struct Phase {
    const char* name;
    double at;
  };
  Clock::time_point began_;
  std::vector<Phase> phases_;
};

struct Training {
  nn::Sequential& net;
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

// Random uint8 images and labels of the dataset's shape: a test split a tenth the size.
data::Dataset synthetic(const TrainConfig& c, data::Split split) {
  bool cifar = c.dataset == "cifar10";
  int64_t n = split == data::Split::Train ? c.synthetic_images : std::max<int64_t>(c.synthetic_images / 10, 1);
  Shape sizes = cifar ? Shape{n, 3, 32, 32} : Shape{n, 1, 28, 28};
  Generator gen(c.seed + (split == data::Split::Train ? 1 : 2));
  return {randint(0, 256, sizes, {.dtype = DType::UInt8}, &gen), randint(0, 10, {n}, {.dtype = DType::Int64}, &gen)};
}

data::Dataset load(const TrainConfig& c, data::Split split) {
  LOOM_CHECK(c.dataset == "mnist" || c.dataset == "cifar10", ValueError,
             "[train] unknown dataset '{}' (mnist or cifar10)", c.dataset);
  if (c.synthetic_images > 0) return synthetic(c, split);
  return c.dataset == "cifar10" ? data::load_cifar10(c.data, split) : data::load_mnist(c.data, split);
}

data::Dataset first(const data::Dataset& d, int64_t n) {
  if (n <= 0 || n >= d.images.size(0)) return d;
  return {d.images.narrow(0, 0, n).contiguous(), d.labels.narrow(0, 0, n).contiguous()};
}

struct Splits {
  data::Dataset train, test;
  double train_read = 0, test_read = 0;  // when each was in memory, on the trainer's clock
};

// Both splits, read on threads of their own (the test split beside the training
// split) while the caller builds the model: on a GPU the CUDA context starts up
// meanwhile, which takes about as long as inflating the files. An error reading
// either is thrown by the future's get().
std::future<Splits> load_splits(const TrainConfig& c, const StartupPhases& startup) {
  return std::async(std::launch::async, [c, &startup] {
    std::future<data::Dataset> test = std::async(std::launch::async, [&c] {
      return first(load(c, data::Split::Test), c.test_limit);
    });
    Splits splits;
    splits.train = first(load(c, data::Split::Train), c.limit);
    splits.train_read = startup.seconds();
    splits.test = test.get();
    splits.test_read = startup.seconds();
    return splits;
  });
}

// Small sets live on the GPU whole; on the CPU two workers build batches ahead.
// Only training batches are augmented.
data::DataLoader make_loader(const TrainConfig& c, const data::Dataset& set, bool training) {
  bool cifar = c.dataset == "cifar10";
  data::DataLoaderOptions o{.batch_size = training ? c.batch_size : 1000,
                            .shuffle = training,
                            .seed = c.seed,
                            .device = c.device,
                            .mean = cifar ? kCifarMean : kMnistMean,
                            .stddev = cifar ? kCifarStd : kMnistStd};
  if (training) o.augment = {.padding = c.crop_padding, .flip = c.flip};
  if (c.device.is_cuda()) return data::DataLoader::resident(set, o);
  o.num_workers = 2;
  return data::DataLoader(set, o);
}

// The optimizer's state and the schedule's share one checkpoint section.
StateDict optimizer_section(const optim::Optimizer& opt, const optim::LRScheduler* schedule) {
  StateDict state = opt.state_dict();
  if (schedule) {
    for (auto& [name, t] : schedule->state_dict()) state.push_back({kSchedulePrefix + name, t});
  }
  return state;
}

constexpr const char* kFlagPrefix = "flag.";

// The flags that decide what a run computes (not where or how fast), as the
// checkpoint stores them.
std::vector<std::pair<std::string, std::string>> run_flags(const TrainConfig& c) {
  return {{"--data", c.synthetic_images > 0 ? std::string() : c.data},
          {"--synthetic", std::to_string(c.synthetic_images)},
          {"--model", c.model},
          {"--epochs", std::to_string(c.epochs)},
          {"--batch-size", std::to_string(c.batch_size)},
          {"--optimizer", c.optimizer},
          {"--lr", fmt::format("{}", c.lr)},
          {"--weight-decay", fmt::format("{}", c.weight_decay)},
          {"--label-smoothing", fmt::format("{}", c.label_smoothing)},
          {"--schedule", c.schedule},
          {"--precision", c.precision},
          {"--seed", std::to_string(c.seed)},
          {"--limit", std::to_string(c.limit)},
          {"dataset", c.dataset}};
}

// One warning per flag that differs from the checkpoint's run.
std::vector<std::string> changed_flags(const TrainConfig& c, const TrainingCheckpoint& ckpt) {
  std::vector<std::string> warnings;
  for (const auto& [flag, now] : run_flags(c)) {
    auto found = ckpt.extra.find(kFlagPrefix + flag);
    if (found == ckpt.extra.end() || found->second == now) continue;
    // Text from the file: shown escaped where it would not print as itself.
    const std::string saved = printable(found->second);
    // The optimizer's state_dict carries its hyper-parameters, so for these
    // the checkpoint wins; saying otherwise would mislead.
    if (flag == "--lr" || flag == "--weight-decay") {
      warnings.push_back(fmt::format(
          "{} was '{}' in the run that wrote {} and is '{}' now: training goes on with the "
          "checkpoint's value '{}' (the optimizer state carries it)",
          flag, saved, c.resume, now, saved));
      continue;
    }
    warnings.push_back(fmt::format(
        "{} was '{}' in the run that wrote {} and is '{}' now: the command line's value wins (the "
        "weights, optimizer state and schedule position come from the checkpoint), so the result "
        "differs from a run with these flags from the start",
        flag, saved, c.resume, now));
  }
  return warnings;
}

// The checkpoint's states into the model, optimizer and schedule; an error
// names the checkpoint, which is what is wrong (a CRC-valid file whose
// optimizer step is 1e30 used to fail later as "the loss was not finite").
void load_states(const TrainConfig& c, Training& t, const TrainingCheckpoint& ckpt) {
  StateDict optimizer_state, schedule_state;
  for (const auto& [name, tensor] : ckpt.optimizer) {
    if (name.starts_with(kSchedulePrefix)) {
      schedule_state.push_back({name.substr(std::string(kSchedulePrefix).size()), tensor});
    } else {
      optimizer_state.push_back({name, tensor});
    }
  }
  try {
    t.net.load_state_dict(ckpt.model);
    t.opt.load_state_dict(optimizer_state);
    if (t.schedule) t.schedule->load_state_dict(schedule_state);
  } catch (const Error& e) {
    throw IoError(fmt::format("[train] --resume {}: the checkpoint does not fit this run: {}",
                              c.resume, e.what()));
  }
}

int resume(const TrainConfig& c, Training& t, std::vector<std::string>& warnings) {
  TrainingCheckpoint ckpt = load_checkpoint(c.resume, c.device);
  for (std::string& warning : changed_flags(c, ckpt)) {
    std::fprintf(stderr, "train: warning: %s\n", warning.c_str());
    warnings.push_back(std::move(warning));
  }
  load_states(c, t, ckpt);
  default_generator().set_state(ckpt.rng_seed, ckpt.rng_offset);
  return static_cast<int>(ckpt.epoch);
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
#ifdef LOOM_WITH_CUDA
  if (c.device.is_cuda()) {
    const cudnn::PlanCache& plans = cudnn::PlanCache::global();
    const cudnn::PlanCacheStats s = plans.stats();
    if (c.progress) {
      std::printf("cuDNN plans (%s): %lld built, %lld restored from plan files (%lld in the "
                  "background), %lld started lazily, %lld specialized later, %lld reused a kernel "
                  "compiled for another batch size\n",
                  std::string(plan_build_mode_name(plan_build_mode())).c_str(),
                  static_cast<long long>(s.plans_built), static_cast<long long>(s.plans_restored),
                  static_cast<long long>(s.background_restores), static_cast<long long>(s.lazy_plans),
                  static_cast<long long>(s.plans_specialized), static_cast<long long>(s.kernels_reused));
    }
    if (timeline.is_open()) timeline << plans.timeline_table();
    plans_reported = true;
  }
#endif
  if (!timeline.is_open()) return;
  if (!plans_reported) timeline << "no cuDNN plans: the run was on the CPU\n";
  timeline << startup_line << "\n";
}

void save(const TrainConfig& c, Training& t, int epochs_done) {
  TrainingCheckpoint ckpt{.model = t.net.state_dict(),
                          .optimizer = optimizer_section(t.opt, t.schedule),
                          .epoch = epochs_done,
                          .rng_seed = default_generator().seed(),
                          .rng_offset = default_generator().offset()};
  for (const auto& [flag, value] : run_flags(c)) ckpt.extra[kFlagPrefix + flag] = value;
  save_checkpoint(c.save, ckpt);
}

// The precision that runs: the CPU has neither TF32 nor bf16 autocast, so
// every name computes in IEEE fp32 there.
std::string precision_shown(const TrainConfig& c) {
  if (c.device.is_cuda()) return c.precision;
  return c.precision == "strict" ? "fp32" : fmt::format("fp32 (the CPU has no {})", c.precision);
}

// A bad --save fails now, not after the first epoch's work.
void check_save(const TrainConfig& c) {
  if (c.save.empty()) return;
  try {
    check_save_path(c.save);
  } catch (const IoError& e) {
    throw IoError(fmt::format("[train] --save {} cannot be written (checked before training): {}",
                              c.save, e.what()));
  }
}

// The flags that decide what the run computes, and the device, as a command
// line: the metrics file's flags column.
std::string flags_text(const TrainConfig& c) {
  std::string text;
  for (const auto& [flag, value] : run_flags(c)) {
    if (!flag.starts_with("--") || value.empty()) continue;  // "dataset" is the program's; no --data under --synthetic
    text += fmt::format("{}{} {}", text.empty() ? "" : " ", flag, value);
  }
  return text + " --device " + c.device.str();
}

// Runs `args` (args[0] found on PATH) with its output passed through, and
// returns its exit status: 127 when it could not start.
int run_command(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  // posix_spawn, not fork: the data loader's worker threads are running.
  if (::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return 127;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The Python that runs the plot tool: $LOOM_PYTHON, else Debian's (where its
// python3-matplotlib lives, whatever python3 comes first on PATH), else python3.
std::string plot_python() {
  if (const char* python = std::getenv("LOOM_PYTHON"); python != nullptr && *python != '\0') return python;
  std::error_code error;
  return std::filesystem::exists("/usr/bin/python3", error) ? "/usr/bin/python3" : "python3";
}

// The plot tool, found now so that a missing tool or matplotlib fails before
// the training, not after it ("" without --plot).
std::string check_plot(const TrainConfig& c) {
  if (c.plot.empty()) return "";
  LOOM_CHECK(c.plot.ends_with(".png"), ValueError, "[train] --plot '{}': the picture is a PNG, so the name ends in .png", c.plot);
  try {
    check_save_path(c.plot);
  } catch (const IoError& e) {
    throw IoError(fmt::format("[train] --plot {} cannot be written (checked before training): {}", c.plot, e.what()));
  }
  const std::string tool = plot_tool_path();
  LOOM_CHECK(!tool.empty(), IoError,
             "[train] --plot: tools/plot_metrics.py is not among this program's runfiles (checked "
             "before training); start the trainer with bazel run, or as bazel-bin/examples/...");
  const std::string python = plot_python();
  const int status = run_command({python, tool, "--check"});
  LOOM_CHECK(status == 0, IoError,
             "[train] --plot needs Python with matplotlib (checked before training; {} {}): "
             "install Debian's python3-matplotlib with 'bash tools/setup.sh python3-matplotlib', "
             "or set LOOM_PYTHON to a Python that has it, or drop --plot",
             python, status == 127 ? "could not start" : "has no matplotlib");
  return tool;
}

// Deletes a temporary file when the run ends, however it ends.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::string path) : path_(std::move(path)) {}
  ~TemporaryFile() {
    std::error_code ignored;  // a file that is already gone is fine
    if (!path_.empty()) std::filesystem::remove(path_, ignored);
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

 private:
  std::string path_;
};

void draw_plot(const TrainConfig& c, const std::string& tool, const std::string& metrics,
               const std::string& run_id) {
  const int status = run_command({plot_python(), tool, metrics, "--run-id", run_id, "--out",
                                  c.plot, "--title", fmt::format("{} on {}", c.model, c.device.str())});
  LOOM_CHECK(status == 0, IoError,
             "[train] --plot: tools/plot_metrics.py exited with {} (its message is above); the "
             "training itself finished{}",
             status, c.metrics.empty() ? "" : ", and its metrics are in " + c.metrics);
  if (c.progress) std::printf("training curves written to %s\n", c.plot.c_str());
}

}  // namespace

std::string plot_tool_path() {
  namespace fs = std::filesystem;
  constexpr const char* kTool = "loom/tools/plot_metrics.py";
  std::vector<fs::path> roots;
  std::error_code error;
  // A binary's runfiles lie beside it; under a test, its own tree comes from the environment.
  if (fs::path exe = fs::read_symlink("/proc/self/exe", error); !error) roots.push_back(exe.string() + ".runfiles");
  for (const char* variable : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(variable)) roots.push_back(dir);
  }
  for (const fs::path& root : roots) {
    if (fs::is_regular_file(root / kTool, error)) return (root / kTool).string();
  }
  return "";
}

bool metrics_format_known(const std::string& path) {
  return path.ends_with(".csv") || path.ends_with(".jsonl");
}

PrecisionScope::PrecisionScope(const std::string& precision, Device device, bool autotune)
    : numerics_(policy_of(precision, autotune)), autocast_(autocast_of(precision, device)) {}

namespace {

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

// The training run; `group` is null unless it is one rank of a data-parallel job.
TrainResult train_on(const TrainConfig& c, std::shared_ptr<dist::ProcessGroup> group) {
  const auto began = std::chrono::steady_clock::now();
  LOOM_CHECK(c.epochs >= 1 && c.batch_size >= 1, ValueError,
             "[train] epochs and batch size must be positive, got {} and {}", c.epochs, c.batch_size);
  LOOM_CHECK(c.target_accuracy >= 0 && c.target_accuracy <= 1 && c.profile_steps >= 0, ValueError,
             "[train] target accuracy must be in [0, 1] and profile steps >= 0, got {} and {}",
             c.target_accuracy, c.profile_steps);
  LOOM_CHECK(c.metrics.empty() || metrics_format_known(c.metrics), ValueError,
             "[train] the metrics file '{}' must end in .csv or .jsonl (the format follows it)",
             c.metrics);
  check_save(c);
  const std::string plot_tool = check_plot(c);
  PrecisionScope precision(c.precision, c.device, c.autotune);
  AnomalyGuard anomaly(c.detect_anomaly);
  manual_seed(c.seed);
  StartupPhases startup(began);
  std::future<Splits> loading = load_splits(c, startup);
  nn::Sequential net = make_model(c.model);
  net.to(c.device);
  if (c.device.is_cuda()) net.to(MemoryFormat::ChannelsLast);  // cuDNN's native layout
  if (c.fuse) nn::fuse(net);  // same parameters and state_dict names; unfused where cuDNN has no engine
  startup.mark("model on device");
  auto [train_set, test_set, train_read, test_read] = loading.get();
  startup.mark_at("train split read", train_read);
  startup.mark_at("test split read", test_read);
  startup.mark("data in hand");
  data::DataLoader train_loader =
      make_loader(c, group ? epoch_shard(train_set, c, *group, 0) : train_set, /*training=*/true);
  data::DataLoader test_loader = make_loader(c, test_set, /*training=*/false);
  startup.mark("loaders ready");
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (group) ddp = std::make_unique<nn::DistributedDataParallel>(std::shared_ptr<nn::Module>(&net, [](nn::Module*) {}), group);
  nn::Module& stepped = ddp ? static_cast<nn::Module&>(*ddp) : net;  // DDP averages the gradients
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(c, net.parameters());
  std::unique_ptr<optim::LRScheduler> schedule = make_schedule(c, *opt, train_loader.size());
  // Anomaly mode reads every op's values back, which a captured graph cannot.
  optim::TrainStep step(step_function(stepped, c), *opt, {.cuda_graph = c.cuda_graph && !c.detect_anomaly});
  optim::TrainStep profiled(step_function(stepped, c), *opt, {.cuda_graph = false});
  startup.mark("optimizer and step ready");
  TrainResult result;
  Training t{net, *opt, schedule.get(), train_loader, step, profiled, 0, startup};
  t.first_epoch = c.resume.empty() ? 0 : resume(c, t, result.warnings);
  const int start = t.first_epoch;
  if (start >= c.epochs) {
    // Exiting 0 in silence would read as a finished training run.
    std::printf("nothing to do: checkpoint is at epoch %d, --epochs %d%s\n", start, c.epochs,
                c.plot.empty() ? "" : " (so no --plot picture either)");
    result.model = net.state_dict();
    return result;
  }
  if (c.progress) {
    // The lr the optimizer holds: after a resume it is the checkpoint's, not --lr.
    const double lr = opt->param_groups().at(0).lr.value_or(c.lr);
    std::printf("%s on %s: %lld training images, batch %lld, %s lr %g, schedule %s, %s%s%s\n",
                c.model.c_str(), c.device.str().c_str(),
                static_cast<long long>(train_set.images.size(0)), static_cast<long long>(c.batch_size),
                c.optimizer.c_str(), lr, c.schedule.c_str(), precision_shown(c).c_str(),
                c.detect_anomaly ? ", anomaly mode (eager steps, every op checked for NaN/inf)" : "",
                start > 0 ? fmt::format(", resumed after epoch {}", start).c_str() : "");
  }
  const std::string run_id = new_run_id();
  // --plot draws from the metrics file: a temporary one when there is no --metrics.
  const std::string metrics_path =
      !c.metrics.empty() || c.plot.empty() ? c.metrics : temporary_metrics_path(run_id);
  TemporaryFile temporary_metrics(metrics_path == c.metrics ? "" : metrics_path);
  Metrics metrics(metrics_path, run_id, flags_text(c));
  for (int epoch = start; epoch < c.epochs; ++epoch) {
    if (group && epoch > 0) train_loader = make_loader(c, epoch_shard(train_set, c, *group, epoch), true);
    train_loader.set_epoch(epoch);
    EpochResult r = train_epoch(t, epoch + 1, c);
    if (group) r.images_per_second *= group->size();  // every rank steps in lockstep
    std::tie(r.test_loss, r.test_accuracy) = evaluate(net, test_loader, c);
    r.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (c.progress) {
      std::printf("epoch %d: train loss %.4f, train accuracy %.4f, test loss %.4f, test accuracy %.4f, "
                  "%.0f img/s, %.2f s (%.2f s since start)%s\n",
                  r.epoch, r.train_loss, r.train_accuracy, r.test_loss, r.test_accuracy,
                  r.images_per_second, r.seconds,
                  r.elapsed_seconds,
                  r.skipped_steps > 0
                      ? fmt::format(", {} steps skipped (non-finite loss)", r.skipped_steps).c_str()
                      : "");
      std::fflush(stdout);
    }
    metrics.write(r);
    result.epochs.push_back(r);
    if (!c.save.empty()) save(c, t, epoch + 1);
    if (c.target_accuracy > 0 && r.test_accuracy >= c.target_accuracy) break;
  }
  if (!c.plot.empty()) draw_plot(c, plot_tool, metrics_path, run_id);
  if (c.progress) std::printf("%s\n", startup.line().c_str());
  report_plans(c, startup.line());
  result.model = net.state_dict();
  return result;
}

}  // namespace

TrainResult train(const TrainConfig& config) {
  if (!config.distributed) return train_on(config, nullptr);
  std::shared_ptr<dist::ProcessGroup> group = join_job(config);
  return run_or_abort(*group, [&] { return train_on(rank_config(config, *group), group); });
}

}  // namespace loom::examples
