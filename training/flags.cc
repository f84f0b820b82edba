// File: training/flags.cc
// Whole-token flag parsing with range checks, and the trainers' main().
#include "training/flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <initializer_list>
#include <iterator>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/ops/fusion_report.h"
#include "core/shape.h"
#include "core/step_boundary.h"
#include "models/registry.h"
#include "training/user_path.h"
namespace loom::training {

std::string models_for(const std::string& dataset) {
  std::vector<std::string> names;
  for (const models::ZooModel& row : models::zoo()) {
    if (row.dataset == dataset) names.push_back(row.name);
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

namespace {

constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxBatch = int64_t{1} << 24;
constexpr int64_t kMaxImages = int64_t{1} << 40;

// The whole of `text` as an integer in [min, max]; from_chars takes no sign
// for unsigned types, no leading space or '+', and stops at junk, which is an error here.
template <class Int>
Int parse_integer(const std::string& flag, const std::string& text, Int min, Int max) {
  Int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool whole = error == std::errc() && end == text.data() + text.size() && !text.empty();
  LOOM_CHECK(whole && value >= min && value <= max, ValueError,
             "{} needs a whole number from {} to {}, got '{}'", flag, min, max, text);
  return value;
}

// The whole of `text` as a finite number in [min, max] (or [min, max) when
// `max_open`).
double parse_real(const std::string& flag, const std::string& text, double min, double max,
                  bool max_open = false) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool whole = error == std::errc() && end == text.data() + text.size() && !text.empty();
  const bool in_range = std::isfinite(value) && value >= min && (max_open ? value < max : value <= max);
  LOOM_CHECK(whole && in_range, ValueError, "{} needs a finite number in [{}, {}{}, got '{}'", flag,
             min, max, max_open ? ")" : "]", text);
  return value;
}

double parse_positive(const std::string& flag, const std::string& text) {
  double value = parse_real(flag, text, 0, std::numeric_limits<double>::max());
  LOOM_CHECK(value > 0, ValueError, "{} must be greater than 0, got '{}'", flag, text);
  return value;
}

Device parse_device(const std::string& name) {
  if (name == "auto") return cuda_available() ? Device::cuda() : Device::cpu();
  Device device;
  try {
    device = Device::parse(name);
  } catch (const ValueError&) {
    throw ValueError(
        fmt::format("--device: unknown device '{}' (auto, cpu, cuda or cuda:k)", name));
  }
  // Checked here, before any data is loaded, and answered with the flag to
  // change rather than with the library's advice about where batches live.
  if (device.is_cuda()) {
    LOOM_CHECK(cuda_available(), ValueError,
               "--device {}: no usable GPU: use --device cpu or --device auto", name);
    LOOM_CHECK(device.index < cuda_device_count(), ValueError,
               "--device {}: this machine has {} GPU(s), cuda:0 to cuda:{}", name,
               cuda_device_count(), cuda_device_count() - 1);
  }
  return device;
}

// A path flag's value: empty is no path (the flag would silently mean "off").
std::string parse_path(const std::string& flag, const std::string& path) {
  LOOM_CHECK(!path.empty(), ValueError, "{} needs a path, got ''", flag);
  return path;
}

std::string parse_metrics(const std::string& path) {
  LOOM_CHECK(metrics_format_known(path), ValueError,
             "--metrics '{}': the file name must end in .csv or .jsonl (the format follows it)",
             path);
  return path;
}

std::string parse_plot(const std::string& path) {
  LOOM_CHECK(path.ends_with(".png"), ValueError, "--plot '{}': the picture is a PNG, so the name ends in .png", path);
  return path;
}

// The name ends in .onnx, which also catches a forgotten value (--export-onnx --epochs 3).
std::string parse_export_onnx(const std::string& path) {
  LOOM_CHECK(path.ends_with(".onnx") && path.size() > 5, ValueError,
             "--export-onnx '{}': an ONNX model's file name ends in .onnx, e.g. --export-onnx model.onnx", path);
  return path;
}

// Each flag that takes a value, and what it sets.
using Setter = std::function<void(TrainConfig&, const std::string& flag, const std::string&)>;

const std::map<std::string, Setter>& value_flags() {
  using C = TrainConfig;
  using S = const std::string&;
  static const std::map<std::string, Setter> flags = {
      {"--data", [](C& c, S f, S v) { c.data = parse_path(f, v); }},
      {"--synthetic", [](C& c, S f, S v) { c.synthetic_images = parse_integer<int64_t>(f, v, 1, kMaxImages); }},
      {"--model", [](C& c, S, S v) { c.model = v; }},
      {"--epochs", [](C& c, S f, S v) { c.epochs = static_cast<int>(parse_integer<int64_t>(f, v, 1, kMaxEpochs)); }},
      {"--batch-size", [](C& c, S f, S v) { c.batch_size = parse_integer<int64_t>(f, v, 1, kMaxBatch); }},
      {"--optimizer", [](C& c, S, S v) { c.optimizer = v; }},
      {"--lr", [](C& c, S f, S v) { c.lr = parse_positive(f, v); }},
      {"--weight-decay", [](C& c, S f, S v) { c.weight_decay = parse_real(f, v, 0, 1e6); }},
      {"--label-smoothing", [](C& c, S f, S v) { c.label_smoothing = parse_real(f, v, 0, 1, true); }},
      {"--schedule", [](C& c, S, S v) { c.schedule = v; }},
      {"--precision", [](C& c, S, S v) { c.precision = v; }},
      {"--target-accuracy", [](C& c, S f, S v) { c.target_accuracy = parse_real(f, v, 0, 1); }},
      {"--profile", [](C& c, S f, S v) { c.profile_steps = parse_integer<int64_t>(f, v, 1, 1'000'000); }},
      {"--seed", [](C& c, S f, S v) { c.seed = parse_integer<uint64_t>(f, v, 0, std::numeric_limits<uint64_t>::max()); }},
      {"--limit", [](C& c, S f, S v) { c.limit = parse_integer<int64_t>(f, v, 1, kMaxImages); }},
      {"--save", [](C& c, S f, S v) { c.save = parse_path(f, v); }},
      {"--resume", [](C& c, S f, S v) { c.resume = parse_path(f, v); }},
      {"--metrics", [](C& c, S, S v) { c.metrics = parse_metrics(v); }},
      {"--plot", [](C& c, S, S v) { c.plot = parse_plot(v); }},
      {"--export-onnx", [](C& c, S, S v) { c.export_onnx = parse_export_onnx(v); }},
      {"--device", [](C& c, S, S v) { c.device = parse_device(v); }},
  };
  return flags;
}

const std::map<std::string, std::function<void(ParsedFlags&)>>& switch_flags() {
  static const std::map<std::string, std::function<void(ParsedFlags&)>> flags = {
      {"--help", [](ParsedFlags& p) { p.help = true; }},
      {"-h", [](ParsedFlags& p) { p.help = true; }},
      {"--explain", [](ParsedFlags& p) { p.explain = true; }},
      {"--fusion-report", [](ParsedFlags& p) { p.fusion_report = true; }},
      {"--no-cuda-graph", [](ParsedFlags& p) { p.config.cuda_graph = false; }},
      {"--no-fuse", [](ParsedFlags& p) { p.config.fuse = false; }},
      {"--autotune", [](ParsedFlags& p) { p.config.autotune = true; }},
      {"--allow-nonfinite-loss", [](ParsedFlags& p) { p.config.stop_on_nonfinite_loss = false; }},
      {"--detect-anomaly", [](ParsedFlags& p) { p.config.detect_anomaly = true; }},
      {"--distributed", [](ParsedFlags& p) { p.config.distributed = true; }},
  };
  return flags;
}

// One of `names` or a ValueError that lists them.
void check_name(const std::string& flag, const std::string& value,
                std::initializer_list<const char*> names) {
  std::string listed;
  for (const char* name : names) {
    if (value == name) return;
    listed += listed.empty() ? name : std::string(", ") + name;
  }
  throw ValueError(fmt::format("{}: unknown value '{}' ({})", flag, value, listed));
}

// A model of the zoo's registry whose data set is the trainer's.
void check_model(const TrainConfig& c) {
  const std::vector<std::string> names = models::zoo_names();
  LOOM_CHECK(std::find(names.begin(), names.end(), c.model) != names.end(), ValueError,
             "--model: unknown value '{}' ({} takes {})", c.model, c.dataset, models_for(c.dataset));
  const models::ZooModel& row = models::zoo_model(c.model);
  LOOM_CHECK(row.dataset == c.dataset, ValueError, "--model {} does not fit {}: it takes {} images ({}); {} takes {}",
             c.model, c.dataset == "cifar10" ? "CIFAR-10" : "MNIST-format data", shape_str(row.input), row.dataset,
             c.dataset, models_for(c.dataset));
}

// The checks that need no data, so that a wrong flag is a usage error (exit 2)
// at once instead of a failure after the data has been loaded.
void check_usage(const TrainConfig& c) {
  check_name("--optimizer", c.optimizer, {"adagrad", "adam", "adamw", "rmsprop", "sgd"});
  check_name("--schedule", c.schedule, {"none", "step", "cosine", "onecycle"});
  check_name("--precision", c.precision, {"tf32", "strict", "bf16"});
  const bool cifar = c.dataset == "cifar10";
  check_model(c);
  // The CPU has no bf16 autocast: accepting the flag would report a precision
  // that does not run.
  LOOM_CHECK(c.precision != "bf16" || c.device.is_cuda(), ValueError,
             "--precision bf16 needs a GPU: the CPU computes in fp32 (drop --precision, or use "
             "--device cuda on a machine with one)");
  LOOM_CHECK(!cifar || c.synthetic_images > 0 || !c.data.empty(), ValueError,
             "no data: pass --data DIR, a folder with CIFAR-10's binary version "
             "(data_batch_1.bin .. data_batch_5.bin and test_batch.bin, from "
             "cifar-10-binary.tar.gz), or --synthetic N to train on N generated images");
}

}  // namespace

ParsedFlags parse_flags(const std::vector<std::string>& args, TrainConfig defaults) {
  ParsedFlags parsed{.config = std::move(defaults)};
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    // --flag=value is the same as --flag value.
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg.resize(eq);
    }
    if (auto on = switch_flags().find(arg); on != switch_flags().end()) {
      LOOM_CHECK(!inline_value, ValueError, "{} takes no value, got '{}'", arg, args[i]);
      on->second(parsed);
      if (parsed.help) return parsed;
      continue;
    }
    auto flag = value_flags().find(arg);
    LOOM_CHECK(flag != value_flags().end(), ValueError, "unknown argument '{}'", arg);
    LOOM_CHECK(inline_value || i + 1 < args.size(), ValueError, "{} needs a value", arg);
    flag->second(parsed.config, arg, inline_value ? *inline_value : args[++i]);
  }
  check_usage(parsed.config);
  return parsed;
}

void resolve_user_paths(TrainConfig& config, const char* working_directory) {
  for (std::string* path :
       {&config.data, &config.save, &config.resume, &config.metrics, &config.plot, &config.export_onnx}) {
    *path = user_path(*path, working_directory);
  }
}

namespace {

// The file `path` names, for comparing paths: absolute, without . and ..,
// and through the symbolic links that exist.
std::filesystem::path file_named(const std::string& path) {
  std::error_code error;
  std::filesystem::path canonical = std::filesystem::weakly_canonical(path, error);
  if (error) canonical = std::filesystem::absolute(path, error).lexically_normal();
  return canonical;
}

}  // namespace

void check_paths(const TrainConfig& c) {
  const std::pair<const char*, const std::string*> outputs[] = {
      {"--save", &c.save}, {"--metrics", &c.metrics}, {"--plot", &c.plot}, {"--export-onnx", &c.export_onnx}};
  for (size_t i = 0; i < std::size(outputs); ++i) {
    if (outputs[i].second->empty()) continue;
    const std::filesystem::path file = file_named(*outputs[i].second);
    for (size_t j = i + 1; j < std::size(outputs); ++j) {
      LOOM_CHECK(outputs[j].second->empty() || file_named(*outputs[j].second) != file, ValueError,
                 "{} and {} both name {}: each output needs a file of its own", outputs[i].first,
                 outputs[j].first, *outputs[i].second);
    }
    // Writing the checkpoint being resumed is how a run goes on; the others would destroy it.
    LOOM_CHECK(i == 0 || c.resume.empty() || file_named(c.resume) != file, ValueError,
               "{} names the checkpoint --resume reads ({}); give it a file of its own",
               outputs[i].first, c.resume);
  }
}

int train_main(int argc, char** argv, TrainConfig defaults, const char* usage) {
  ParsedFlags flags;
  try {
    flags = parse_flags(std::vector<std::string>(argv + 1, argv + argc), std::move(defaults));
    // Under `bazel run` the program starts inside its runfiles tree; Bazel
    // names the directory the user typed the command in.
    resolve_user_paths(flags.config, std::getenv("BUILD_WORKING_DIRECTORY"));
    check_paths(flags.config);
  } catch (const ValueError& e) {
    // One line that names the problem; the usage is one --help away.
    std::fprintf(stderr, "train: %s (--help lists the flags)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: internal error while reading the flags: %s\n", e.what());
    return 1;
  }
  if (flags.help) {
    std::printf("%sModels for --model (models/registry.h): %s\n", usage, models_for(flags.config.dataset).c_str());
    return 0;
  }
  // Everything after the flags is inside the try: --explain's cache dump can
  // throw a CUDA error as well as training can.
  try {
    train(flags.config);
    if (flags.explain) {
      std::printf("%s", plan_report().c_str());
    }
    if (flags.fusion_report) std::printf("%s", fusion::report({.measure = true}).c_str());
  } catch (const Error& e) {
    std::fflush(stdout);  // what was printed comes before the error in a shared log
    std::fprintf(stderr, "\ntrain: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "\ntrain: out of memory (std::bad_alloc); try a smaller --batch-size, "
                 "--synthetic or --limit\n");
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);  // what was printed comes before the error in a shared log
    std::fprintf(stderr, "\ntrain: internal error: %s (a bug in Loom: please report it with the "
                 "command line)\n", e.what());
    return 1;
  } catch (...) {
    std::fflush(stdout);  // what was printed comes before the error in a shared log
    std::fprintf(stderr, "\ntrain: internal error: an exception that is not a std::exception (a "
                 "bug in Loom: please report it with the command line)\n");
    return 1;
  }
  return 0;
}

}  // namespace loom::training
