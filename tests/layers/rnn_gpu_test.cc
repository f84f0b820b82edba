// File: tests/layers/rnn_gpu_test.cc
// RNN, LSTM and GRU on the GPU against their CPU float64 twins (which
// rnn_test checks against PyTorch's equations): output, final state, the
// input's and every parameter's gradient over random configurations, in
// strict fp32 and under bf16 autocast (tanh, LSTM, GRU), through both GPU
// tiers (every step in one kernel where a layer fits, step by step), each
// forced by LOOM_RNN_KERNEL, padded sequences with their lengths too, a packed
// batch through an LSTM with proj_size; and an LSTM classifier with dropout
// between its layers trained by a captured TrainStep with the eager steps' bits.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/cuda/rnn.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "optim/train_step.h"
#include "tests/layers/module_testing.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

struct Outcome {
  Tensor output, h, c, dx;
  std::vector<Tensor> grads;
};

// Runs m on x from state (h0, c0) (padded sequences of these lengths when
// given), then a backward of a weighted sum of the output and the final state;
// everything comes back in float64 on the CPU.
Outcome run(nn::RNNBase& m, const Tensor& x_in, const Tensor& h0, const Tensor& c0, const Tensor& weights,
            const std::vector<int64_t>& lengths = {}) {
  Tensor x = x_in.detach().requires_grad_(true);
  const nn::RNNOutput out = m(x, {h0, c0}, lengths);
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

// The sizes a group of random configurations draws from, and the GPU tier
// every one of them must take.
struct Sizes {
  int64_t batch_lo, batch_hi, hidden_lo, hidden_hi;
  bool one_kernel;  // every step in one kernel (cuda::rnn_run_fits), or step by step
};

// Forces one GPU tier (LOOM_RNN_KERNEL: run, steps) while it lives.
class TierForced {
 public:
  explicit TierForced(const char* tier) { setenv("LOOM_RNN_KERNEL", tier, 1); }
  ~TierForced() { unsetenv("LOOM_RNN_KERNEL"); }
  TierForced(const TierForced&) = delete;
  TierForced& operator=(const TierForced&) = delete;
};

bool fits_one_kernel(RnnMode mode, int64_t batch, int64_t hidden, DType dtype) {
  DeviceGuard guard(testing::test_gpu());
  return cuda::rnn_run_fits(mode, batch, hidden, dtype);
}

// With `padded`, each configuration runs padded sequences of random lengths.
void check_random_configs(bool bf16, uint64_t seed, const Sizes& sizes, int count = 24, bool padded = false) {
  Generator gen(seed);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return static_cast<int64_t>(randint(lo, hi + 1, {1}, {}, &gen).item());
  };
  // A ReLU recurrence under bf16 is left out: a pre-activation that rounding
  // moves across 0 switches its unit on or off, and the difference then runs
  // through every later step, far beyond any tolerance (strict fp32 checks it).
  std::vector<RnnMode> modes{RnnMode::Tanh, RnnMode::Relu, RnnMode::Lstm, RnnMode::Gru};
  if (bf16) modes.erase(modes.begin() + 1);
  for (int index = 0; index < count; ++index) {
    const RnnMode mode = modes[index % modes.size()];
    const int64_t layers = pick(1, 3), L = pick(1, 12), N = pick(sizes.batch_lo, sizes.batch_hi), in = pick(1, 24),
                  hidden = pick(sizes.hidden_lo, sizes.hidden_hi);
    const bool bidirectional = pick(0, 1) == 1, given = pick(0, 1) == 1;
    const nn::RNNOptions o{.num_layers = layers, .bidirectional = bidirectional, .generator = &gen};
    CAPTURE(fmt::format("{} layers={} L={} N={} in={} H={} bi={} state={}", rnn_mode_name(mode), layers, L, N, in,
                        hidden, bidirectional, given));
    CHECK(fits_one_kernel(mode, N, hidden, bf16 ? DType::BFloat16 : DType::Float32) == sizes.one_kernel);
    auto cpu = testing::make_recurrent(mode, in, hidden, o);
    auto gpu = testing::make_recurrent(mode, in, hidden, o);
    gpu->load_state_dict(cpu->state_dict());
    cpu->to(DType::Float64);
    gpu->to(testing::test_gpu());
    const int64_t rows = layers * (bidirectional ? 2 : 1);
    const Tensor x = randn({L, N, in}, {}, &gen), weights = randn({L, N, rows / layers * hidden}, kF64, &gen);
    const Tensor h0 = given ? randn({rows, N, hidden}, {}, &gen) : Tensor();
    const Tensor c0 = given && mode == RnnMode::Lstm ? randn({rows, N, hidden}, {}, &gen) : Tensor();
    std::vector<int64_t> lengths;
    for (int64_t n = 0; padded && n < N; ++n) lengths.push_back(pick(1, L));
    const auto to_cpu64 = [](const Tensor& t) { return t.defined() ? t.to(DType::Float64) : t; };
    const auto to_gpu = [](const Tensor& t) { return t.defined() ? t.to(testing::test_gpu()) : t; };
    const Outcome want = run(*cpu, x.to(DType::Float64), to_cpu64(h0), to_cpu64(c0), weights, lengths);
    std::optional<AutocastGuard> autocast;
    if (bf16) autocast.emplace(DType::BFloat16);
    const Outcome got = run(*gpu, to_gpu(x), to_gpu(h0), to_gpu(c0), weights.to(testing::test_gpu()), lengths);
    compare(got, want, bf16 ? 6e-2 : 2e-4);
  }
}

LOOM_GPU_TEST_CASE("RNN, LSTM and GRU on the GPU match their CPU float64 twins in strict fp32") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  for (const char* tier : {"run", "steps"}) {
    CAPTURE(tier);
    TierForced forced(tier);
    check_random_configs(false, 1301, {1, 9, 1, 40, true});
  }
}

LOOM_GPU_TEST_CASE("padded sequences with their lengths on the GPU match their CPU float64 twins") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  for (const char* tier : {"run", "steps"}) {
    CAPTURE(tier);
    TierForced forced(tier);
    check_random_configs(false, 1305, {1, 9, 1, 40, true}, 16, true);
  }
}

// A packed batch through an LSTM with a projection (composite steps, no
// recurrence kernel): the padded output, the final state and every gradient,
// in strict fp32 or under bf16 autocast (loosely: bf16 keeps 8 bits).
void check_projected_packed(bool bf16) {
  Generator gen(1306);
  const nn::RNNOptions o{.num_layers = 2, .bidirectional = true, .proj_size = 5, .generator = &gen};
  auto cpu = std::make_shared<nn::LSTM>(7, 12, o);
  auto gpu = std::make_shared<nn::LSTM>(7, 12, o);
  gpu->load_state_dict(cpu->state_dict());
  cpu->to(DType::Float64);
  gpu->to(testing::test_gpu());
  const std::vector<int64_t> lengths{4, 9, 1, 6, 9};
  const Tensor x = randn({9, 5, 7}, {}, &gen), h0 = randn({4, 5, 5}, {}, &gen), weights = randn({9, 5, 10}, kF64, &gen);
  const auto outcome = [&](nn::LSTM& m, const Tensor& x_in, const Tensor& h) {
    Tensor xs = x_in.detach().requires_grad_(true);
    const nn::PackedRNNOutput out = m(nn::pack_padded_sequence(xs, lengths, false, false), {h, Tensor()});
    const Tensor y = nn::pad_packed_sequence(out.output).padded.to(DType::Float64).cpu();
    m.zero_grad();
    add(sum(mul(y, weights)), sum(out.state.h.to(DType::Float64).cpu())).backward();
    std::vector<Tensor> got{y, out.state.h.to(DType::Float64).cpu(), out.state.c.to(DType::Float64).cpu(),
                            xs.grad().to(DType::Float64).cpu()};
    for (const Tensor& p : m.parameters()) got.push_back(p.grad().to(DType::Float64).cpu());
    return got;
  };
  const std::vector<Tensor> want = outcome(*cpu, x.to(DType::Float64), h0.to(DType::Float64));
  std::optional<AutocastGuard> autocast;
  if (bf16) autocast.emplace(DType::BFloat16);
  const std::vector<Tensor> got = outcome(*gpu, x.to(testing::test_gpu()), h0.to(testing::test_gpu()));
  REQUIRE(got.size() == want.size());
  const double tol = bf16 ? 6e-2 : 2e-4;
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK_CLOSE(got[i], want[i], tol, i < 3 ? tol : tol * 10);  // gradients sum over steps and entries
  }
}

LOOM_GPU_TEST_CASE("a packed batch through an LSTM with proj_size on the GPU matches its CPU float64 twin") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  check_projected_packed(false);
}

LOOM_GPU_TEST_CASE("an LSTM with proj_size under bf16 autocast on the GPU matches its CPU float64 twin loosely") {
  NumericsGuard bf16({.precision = Precision::Bf16});
  check_projected_packed(true);
}

// 250 hidden units make at least 250 KB of fp32 W_hh (an LSTM's 1 MB), more
// than a block's shared memory on any GPU; 4,000 samples of 48 units are more
// than one wave of 1,024-thread blocks on a GPU of up to 187 multiprocessors.
// Both run step by step, whatever LOOM_RNN_KERNEL asks.
LOOM_GPU_TEST_CASE("recurrent layers too large for one kernel run step by step and match their CPU float64 twins") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  TierForced forced("run");
  check_random_configs(false, 1303, {1, 6, 250, 260, false}, 4);
  check_random_configs(false, 1304, {4000, 4100, 48, 48, false}, 4);
}

LOOM_GPU_TEST_CASE("RNN, LSTM and GRU under bf16 autocast on the GPU match their CPU float64 twins loosely") {
  NumericsGuard bf16({.precision = Precision::Bf16});
  for (const char* tier : {"run", "steps"}) {
    CAPTURE(tier);
    TierForced forced(tier);
    check_random_configs(true, 1302, {1, 9, 1, 40, true});
  }
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
