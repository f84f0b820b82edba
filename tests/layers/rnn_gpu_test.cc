// File: tests/layers/rnn_gpu_test.cc
// RNN, LSTM and GRU on the GPU against their CPU float64 twins (which
// rnn_test checks against PyTorch's equations): output, final state, the
// input's and every parameter's gradient over random configurations, in
// strict fp32 and under bf16 autocast (tanh, LSTM, GRU); and an LSTM classifier with dropout
// between its layers trained by a captured TrainStep with the eager steps' bits.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <memory>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "optim/train_step.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

std::shared_ptr<nn::RNNBase> make_module(RnnMode mode, int64_t in, int64_t hidden, const nn::RNNOptions& o) {
  if (mode == RnnMode::Lstm) return std::make_shared<nn::LSTM>(in, hidden, o);
  if (mode == RnnMode::Gru) return std::make_shared<nn::GRU>(in, hidden, o);
  nn::RNNOptions rnn = o;
  rnn.nonlinearity = mode == RnnMode::Relu ? nn::RNNNonlinearity::ReLU : nn::RNNNonlinearity::Tanh;
  return std::make_shared<nn::RNN>(in, hidden, rnn);
}

struct Outcome {
  Tensor output, h, c, dx;
  std::vector<Tensor> grads;
};

// Runs m on x from state (h0, c0), then a backward of a weighted sum of the
// output and the final state; everything comes back in float64 on the CPU.
Outcome run(nn::RNNBase& m, const Tensor& x_in, const Tensor& h0, const Tensor& c0, const Tensor& weights) {
  Tensor x = x_in.detach().requires_grad_(true);
  const nn::RNNOutput out = m(x, {h0, c0});
  Tensor loss = add(sum(mul(out.output.to(DType::Float64).to(weights.device()), weights)),
                    sum(out.state.h.to(DType::Float64)));
  if (out.state.c.defined()) loss = add(loss, mul(sum(out.state.c.to(DType::Float64)), 0.5));
  m.zero_grad();
  loss.backward();
  Outcome o{out.output.to(DType::Float64).cpu(), out.state.h.to(DType::Float64).cpu(),
            out.state.c.defined() ? out.state.c.to(DType::Float64).cpu() : Tensor(), x.grad().to(DType::Float64).cpu()};
  for (const Tensor& p : m.parameters()) o.grads.push_back(p.grad().to(DType::Float64).cpu());
  return o;
}

void compare(const Outcome& gpu, const Outcome& cpu, double tol) {
  CHECK_CLOSE(gpu.output, cpu.output, tol, tol);
  CHECK_CLOSE(gpu.h, cpu.h, tol, tol);
  CHECK(gpu.c.defined() == cpu.c.defined());
  if (cpu.c.defined()) CHECK_CLOSE(gpu.c, cpu.c, tol, tol);
  CHECK_CLOSE(gpu.dx, cpu.dx, tol, tol);
  REQUIRE(gpu.grads.size() == cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    CAPTURE(i);
    CHECK_CLOSE(gpu.grads[i], cpu.grads[i], tol, tol * 10);  // sums over L * N terms
  }
}

void check_random_configs(bool bf16, uint64_t seed) {
  Generator gen(seed);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return static_cast<int64_t>(randint(lo, hi + 1, {1}, {}, &gen).item());
  };
  // A ReLU recurrence under bf16 is left out: a pre-activation that rounding
  // moves across 0 switches its unit on or off, and the difference then runs
  // through every later step, far beyond any tolerance (strict fp32 checks it).
  const std::vector<RnnMode> modes = bf16 ? std::vector<RnnMode>{RnnMode::Tanh, RnnMode::Lstm, RnnMode::Gru}
                                          : std::vector<RnnMode>{RnnMode::Tanh, RnnMode::Relu, RnnMode::Lstm,
                                                                 RnnMode::Gru};
  for (int index = 0; index < 24; ++index) {
    const RnnMode mode = modes[index % modes.size()];
    const int64_t layers = pick(1, 3), L = pick(1, 12), N = pick(1, 9), in = pick(1, 24), hidden = pick(1, 40);
    const bool bidirectional = pick(0, 1) == 1, given = pick(0, 1) == 1;
    const nn::RNNOptions o{.num_layers = layers, .bidirectional = bidirectional, .generator = &gen};
    CAPTURE(fmt::format("{} layers={} L={} N={} in={} H={} bi={} state={}", rnn_mode_name(mode), layers, L, N, in,
                        hidden, bidirectional, given));
    auto cpu = make_module(mode, in, hidden, o);
    auto gpu = make_module(mode, in, hidden, o);
    gpu->load_state_dict(cpu->state_dict());
    cpu->to(DType::Float64);
    gpu->to(testing::test_gpu());
    const int64_t rows = layers * (bidirectional ? 2 : 1);
    const Tensor x = randn({L, N, in}, {}, &gen), weights = randn({L, N, rows / layers * hidden}, kF64, &gen);
    const Tensor h0 = given ? randn({rows, N, hidden}, {}, &gen) : Tensor();
    const Tensor c0 = given && mode == RnnMode::Lstm ? randn({rows, N, hidden}, {}, &gen) : Tensor();
    const auto to_cpu64 = [](const Tensor& t) { return t.defined() ? t.to(DType::Float64) : t; };
    const auto to_gpu = [](const Tensor& t) { return t.defined() ? t.to(testing::test_gpu()) : t; };
    const Outcome want = run(*cpu, x.to(DType::Float64), to_cpu64(h0), to_cpu64(c0), weights);
    std::optional<AutocastGuard> autocast;
    if (bf16) autocast.emplace(DType::BFloat16);
    const Outcome got = run(*gpu, to_gpu(x), to_gpu(h0), to_gpu(c0), weights.to(testing::test_gpu()));
    compare(got, want, bf16 ? 6e-2 : 2e-4);
  }
}

LOOM_GPU_TEST_CASE("RNN, LSTM and GRU on the GPU match their CPU float64 twins in strict fp32") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  check_random_configs(false, 1301);
}

LOOM_GPU_TEST_CASE("RNN, LSTM and GRU under bf16 autocast on the GPU match their CPU float64 twins loosely") {
  NumericsGuard bf16({.precision = Precision::Bf16});
  check_random_configs(true, 1302);
}

// A sequence classifier with two LSTM layers and dropout between them.
class Tagger : public nn::Module {
 public:
  Tagger() {
    embed_ = register_module("embed", std::make_shared<nn::Embedding>(6, 16));
    lstm_ = register_module("lstm", std::make_shared<nn::LSTM>(
                                        16, 32, nn::RNNOptions{.num_layers = 2, .batch_first = true, .dropout = 0.2}));
    head_ = register_module("head", std::make_shared<nn::Linear>(32, 3));
  }
  Tensor forward(const Tensor& tokens) override { return (*head_)((*lstm_)((*embed_)(tokens)).select(1, -1)); }

 private:
  std::shared_ptr<nn::Embedding> embed_;
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> head_;
};

LOOM_GPU_TEST_CASE("an LSTM with dropout between layers trains captured with the eager steps' bits") {
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  Generator gen(1303);
  std::vector<std::pair<Tensor, Tensor>> data;
  for (int i = 0; i < 3; ++i) {
    const Tensor tokens = randint(0, 6, {16, 10}, {.dtype = DType::Int64}, &gen);
    data.emplace_back(tokens.to(testing::test_gpu()), remainder(tokens.select(1, -1), 3.0).to(testing::test_gpu()));
  }
  struct TaggerRun {
    std::unique_ptr<Tagger> net;
    std::unique_ptr<optim::SGD> opt;
    std::unique_ptr<optim::TrainStep> step;
    explicit TaggerRun(bool graph) {
      manual_seed(17);
      net = std::make_unique<Tagger>();
      net->to(testing::test_gpu());
      opt = std::make_unique<optim::SGD>(net->parameters(), optim::SgdOptions{.lr = 0.3, .momentum = 0.9});
      step = std::make_unique<optim::TrainStep>(
          [this](const Tensor& x, const Tensor& y) { return std::vector<Tensor>{cross_entropy((*net)(x), y)}; }, *opt,
          optim::TrainStepOptions{.cuda_graph = graph});
    }
  };
  std::vector<double> losses[2];
  uint64_t offsets[2] = {0, 0};
  for (int graph = 0; graph < 2; ++graph) {
    TaggerRun run(graph == 1);
    manual_seed(4);  // the same default-generator state, so the same dropout masks, for both runs
    for (int i = 0; i < 40; ++i) losses[graph].push_back((*run.step)(data[i % 3].first, data[i % 3].second)[0].item());
    if (graph == 1) {
      CHECK(run.step->fallback_reason().empty());
      CHECK(run.step->last_step_replayed());
      CHECK(run.step->stats().replays > 30);
    }
    offsets[graph] = default_generator().offset();
  }
  for (size_t i = 0; i < losses[0].size(); ++i) {
    CAPTURE(i);
    CHECK(losses[1][i] == losses[0][i]);
  }
  CHECK(offsets[1] == offsets[0]);
  CHECK(losses[0].back() < losses[0].front());
}

}  // namespace
}  // namespace loom
#endif
