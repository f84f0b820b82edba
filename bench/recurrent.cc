// File: bench/recurrent.cc
// One training step of a recurrent network (nn::LSTM, GRU or RNN, batch_first,
// a mean-squared-error loss on its output, SGD), in ms per step, eager and
// captured by optim::TrainStep; bench/recurrent_torch.py times the same step
// in PyTorch. One JSON line per precision.
//   bench_recurrent --mode lstm --seq 50 --batch 64 --input 128 --hidden 256 --layers 2
// Exits 2 for bad flags, 1 after an error while timing.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/stopwatch.h"
#include "core/autocast.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "layers/rnn.h"
#include "optim/sgd.h"
#include "optim/train_step.h"

namespace loom::bench {
namespace {

constexpr const char* kUsage =
    "usage: bench_recurrent [--mode lstm|gru|rnn] [--seq L] [--batch N] [--input F] [--hidden H]\n"
    "                       [--layers K] [--steps S] [--precisions tf32,bf16] [--device cuda:1]\n";

struct Flags {
  std::map<std::string, std::string> values{{"mode", "lstm"},  {"seq", "50"},    {"batch", "64"},
                                            {"input", "128"},  {"hidden", "256"}, {"layers", "2"},
                                            {"steps", "50"},   {"precisions", "tf32,bf16"}, {"device", "cuda"}};
  int64_t get(const std::string& name) const { return std::stoll(values.at(name)); }
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    LOOM_CHECK(key.rfind("--", 0) == 0 && f.values.count(key.substr(2)) && i + 1 < argc, ValueError,
               "unknown flag or missing value: '{}'", key);
    f.values[key.substr(2)] = argv[i + 1];
  }
  return f;
}

std::shared_ptr<nn::RNNBase> make_net(const Flags& f) {
  const nn::RNNOptions o{.num_layers = f.get("layers"), .batch_first = true};
  const std::string& mode = f.values.at("mode");
  if (mode == "lstm") return std::make_shared<nn::LSTM>(f.get("input"), f.get("hidden"), o);
  if (mode == "gru") return std::make_shared<nn::GRU>(f.get("input"), f.get("hidden"), o);
  LOOM_CHECK(mode == "rnn", ValueError, "--mode must be lstm, gru or rnn, got '{}'", mode);
  return std::make_shared<nn::RNN>(f.get("input"), f.get("hidden"), o);
}

// The median over 3 repeats of `steps` steps, in ms per step.
double time_steps(optim::TrainStep& step, const Tensor& x, const Tensor& y, int64_t steps, Device device) {
  for (int i = 0; i < 10; ++i) step(x, y);
  settle_plans(device, [&] { step(x, y); });
  std::vector<double> ms;
  for (int repeat = 0; repeat < 3; ++repeat) {
    Stopwatch watch(device);
    watch.start();
    for (int64_t i = 0; i < steps; ++i) step(x, y);
    ms.push_back(watch.stop_ms() / static_cast<double>(steps));
  }
  std::sort(ms.begin(), ms.end());
  return ms[1];
}

void run(const Flags& f, const std::string& precision) {
  const Device device = Device::parse(f.values.at("device"));
  const bool bf16 = precision == "bf16";
  LOOM_CHECK(bf16 || precision == "tf32", ValueError, "precision must be tf32 or bf16, got '{}'", precision);
  NumericsGuard numerics({.precision = bf16 ? Precision::Bf16 : Precision::Tf32});
  std::optional<AutocastGuard> autocast;
  if (bf16) autocast.emplace(DType::BFloat16);
  Generator gen(1);
  const Tensor x = randn({f.get("batch"), f.get("seq"), f.get("input")}, {}, &gen).to(device);
  const Tensor y = randn({f.get("batch"), f.get("seq"), f.get("hidden")}, {}, &gen).to(device);
  std::map<std::string, double> ms;
  for (const bool graph : {false, true}) {
    auto net = make_net(f);
    net->to(device);
    optim::SGD opt(net->parameters(), {.lr = 1e-3});
    optim::TrainStep step([&](const Tensor& in, const Tensor& target) {
      return std::vector<Tensor>{mse_loss((*net)(in).to(DType::Float32), target)};
    }, opt, {.cuda_graph = graph});
    ms[graph ? "graph_ms" : "eager_ms"] = time_steps(step, x, y, f.get("steps"), device);
    if (graph && !step.fallback_reason().empty()) {
      std::fprintf(stderr, "fallback: %s\n", step.fallback_reason().c_str());
    }
  }
  std::printf("%s\n", fmt::format(R"({{"framework": "loom", "mode": "{}", "seq": {}, "batch": {}, "input": {}, )"
                                  R"("hidden": {}, "layers": {}, "precision": "{}", "eager_ms": {:.3f}, )"
                                  R"("graph_ms": {:.3f}}})",
                                  f.values.at("mode"), f.get("seq"), f.get("batch"), f.get("input"),
                                  f.get("hidden"), f.get("layers"), precision, ms["eager_ms"], ms["graph_ms"])
                          .c_str());
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  std::optional<loom::bench::Flags> flags;
  try {
    flags = loom::bench::parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_recurrent: %s\n%s", e.what(), loom::bench::kUsage);
    return 2;
  }
  try {
    std::string list = flags->values.at("precisions");
    for (size_t start = 0; start <= list.size();) {
      const size_t end = std::min(list.find(',', start), list.size());
      loom::bench::run(*flags, list.substr(start, end - start));
      start = end + 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
