#include "examples/common/flags.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "core/error.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/plan_cache.h"
#endif

namespace loom::examples {

namespace {

[[noreturn]] void usage_error(const std::string& problem, const char* usage) {
  std::fprintf(stderr, "train: %s\n\n%s", problem.c_str(), usage);
  std::exit(2);
}

Device parse_device(const std::string& name, const char* usage) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda();
  if (name == "auto") return cuda_available() ? Device::cuda() : Device::cpu();
  usage_error("unknown device '" + name + "' (auto, cpu or cuda)", usage);
}

// Each flag that takes a value, and what it sets.
using Setter = std::function<void(TrainConfig&, const std::string&)>;

std::map<std::string, Setter> value_flags(const char* usage) {
  return {
      {"--data", [](TrainConfig& c, const std::string& v) { c.data = v; }},
      {"--synthetic", [](TrainConfig& c, const std::string& v) { c.synthetic_images = std::stoll(v); }},
      {"--model", [](TrainConfig& c, const std::string& v) { c.model = v; }},
      {"--epochs", [](TrainConfig& c, const std::string& v) { c.epochs = std::stoi(v); }},
      {"--batch-size", [](TrainConfig& c, const std::string& v) { c.batch_size = std::stoll(v); }},
      {"--optimizer", [](TrainConfig& c, const std::string& v) { c.optimizer = v; }},
      {"--lr", [](TrainConfig& c, const std::string& v) { c.lr = std::stod(v); }},
      {"--weight-decay", [](TrainConfig& c, const std::string& v) { c.weight_decay = std::stod(v); }},
      {"--label-smoothing", [](TrainConfig& c, const std::string& v) { c.label_smoothing = std::stod(v); }},
      {"--schedule", [](TrainConfig& c, const std::string& v) { c.schedule = v; }},
      {"--precision", [](TrainConfig& c, const std::string& v) { c.precision = v; }},
      {"--target-accuracy", [](TrainConfig& c, const std::string& v) { c.target_accuracy = std::stod(v); }},
      {"--profile", [](TrainConfig& c, const std::string& v) { c.profile_steps = std::stoll(v); }},
      {"--seed", [](TrainConfig& c, const std::string& v) { c.seed = std::stoull(v); }},
      {"--limit", [](TrainConfig& c, const std::string& v) { c.limit = std::stoll(v); }},
      {"--save", [](TrainConfig& c, const std::string& v) { c.save = v; }},
      {"--resume", [](TrainConfig& c, const std::string& v) { c.resume = v; }},
      {"--metrics", [](TrainConfig& c, const std::string& v) { c.metrics = v; }},
      {"--device", [usage](TrainConfig& c, const std::string& v) { c.device = parse_device(v, usage); }},
  };
}

}  // namespace

int train_main(int argc, char** argv, TrainConfig config, const char* usage) {
  bool explain = false;
  const std::map<std::string, Setter> flags = value_flags(usage);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help") {
      std::printf("%s", usage);
      return 0;
    }
    if (arg == "--explain") {
      explain = true;
      continue;
    }
    if (arg == "--no-cuda-graph") {
      config.cuda_graph = false;
      continue;
    }
    if (arg == "--no-fuse") {
      config.fuse = false;
      continue;
    }
    if (arg == "--autotune") {
      config.autotune = true;
      continue;
    }
    if (arg == "--distributed") {
      config.distributed = true;
      continue;
    }
    auto flag = flags.find(arg);
    if (flag == flags.end()) usage_error("unknown argument '" + arg + "'", usage);
    if (i + 1 >= argc) usage_error(arg + " needs a value", usage);
    try {
      flag->second(config, argv[++i]);
    } catch (const std::logic_error&) {  // std::stoi and friends
      usage_error(arg + " needs a number, got '" + argv[i] + "'", usage);
    }
  }
  try {
    train(config);
  } catch (const Error& e) {
    std::fprintf(stderr, "\ntrain: %s\n", e.what());
    return 1;
  }
  if (explain) {
#ifdef LOOM_WITH_CUDA
    std::printf("%s", cudnn::PlanCache::global().explain().c_str());
#else
    std::printf("this build has no CUDA backend, so there is no cuDNN plan cache to explain\n");
#endif
  }
  return 0;
}

}  // namespace loom::examples
