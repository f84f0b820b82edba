// File: tests/optim/train_step_gpu_test.cc
// TrainStep on the GPU: a captured-and-replayed training step gives the same
// bits as eager steps (deterministic policy) over 100 steps, two input shapes
// and a changing learning rate; replays allocate nothing; a step that cannot
// be captured falls back to eager with a reason and the same results.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cmath>
#include <limits>
#include <vector>

#include "core/autocast.h"
#include "core/cuda/allocator.h"
#include "core/cuda/allocator_purpose.h"
#include "core/cuda/runtime.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "optim/train_step.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// B batch; inputs x (B, 1, 28, 28) channels-last, labels y (B).
struct Batch {
  Tensor x, y;
};

std::vector<Batch> batches(int64_t batch, int count, uint64_t seed) {
  Generator gen(seed);
  std::vector<Batch> out;
  for (int i = 0; i < count; ++i) {
    Tensor x = randn({batch, 1, 28, 28}, {}, &gen).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
    Tensor y = randint(0, 10, {batch}, {.dtype = DType::Int64}, &gen).to(testing::test_gpu());
    out.push_back({x, y});
  }
  return out;
}

// A model, its optimizer and schedule, and its TrainStep.
struct Run {
  nn::Sequential net;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::StepLR> schedule;
  std::unique_ptr<optim::TrainStep> step;

  explicit Run(bool graph) {
    manual_seed(7);
    net = nn::mnist_net();
    net.to(testing::test_gpu());
    net.to(MemoryFormat::ChannelsLast);
    opt = std::make_unique<optim::Adam>(net.parameters(), optim::AdamOptions{.lr = 1e-3, .weight_decay = 1e-4});
    schedule = std::make_unique<optim::StepLR>(*opt, 30, 0.5);
    step = std::make_unique<optim::TrainStep>(
        [this](const Tensor& x, const Tensor& y) {
          Tensor logits = net(x);
          return std::vector<Tensor>{cross_entropy(logits, y), logits};
        },
        *opt, optim::TrainStepOptions{.cuda_graph = graph});
  }
};

void check_same_bits(const Tensor& a, const Tensor& b) { CHECK_CLOSE(a.cpu(), b.cpu(), 0, 0); }

// Two runs' state dicts (a model's or an optimizer's), entry by entry.
void check_same_bits(const StateDict& a, const StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    CAPTURE(a[k].first);
    check_same_bits(a[k].second, b[k].second);
  }
}

// A 1-D CNN as a user writes one for signals: a strided Conv1d stem, batch
// norm, max pooling, a depthwise-separable block with a residual add, and an
// adaptive average over L; x (B, 1, L), y (B) of 10 classes.
class SignalNet : public nn::Module {
 public:
  SignalNet() {
    stem_ = register_module("stem", nn::Conv1d(1, 16, 9, {.stride = 2, .padding = 4, .bias = false}));
    norm_ = register_module("norm", nn::BatchNorm1d(16));
    pool_ = register_module("pool", nn::MaxPool1d(3, {.stride = 2, .padding = 1}));
    depthwise_ = register_module("depthwise", nn::Conv1d(16, 16, 5, {.padding = nn::Padding::Same, .groups = 16}));
    pointwise_ = register_module("pointwise", nn::Conv1d(16, 16, 1));
    fc_ = register_module("fc", nn::Linear(16, 10));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = pool_->forward(relu(norm_->forward(stem_->forward(x))));
    const Tensor block = relu(pointwise_->forward(relu(depthwise_->forward(h))) + h);
    return fc_->forward(adaptive_avg_pool1d(block, 1).flatten(1));
  }

 private:
  std::shared_ptr<nn::Conv1d> stem_, depthwise_, pointwise_;
  std::shared_ptr<nn::BatchNorm1d> norm_;
  std::shared_ptr<nn::MaxPool1d> pool_;
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace

LOOM_GPU_TEST_CASE("a 1-D CNN of Conv1d, BatchNorm1d and 1-D pooling trains captured with the eager steps' bits") {
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  Generator gen(5);
  std::vector<Batch> signals;
  for (int i = 0; i < 3; ++i) {
    signals.push_back({randn({32, 1, 200}, {}, &gen).to(testing::test_gpu()),
                       randint(0, 10, {32}, {.dtype = DType::Int64}, &gen).to(testing::test_gpu())});
  }
  struct SignalRun {
    SignalNet net = seeded(11);
    std::unique_ptr<optim::SGD> opt;
    std::unique_ptr<optim::TrainStep> step;
    static SignalNet seeded(uint64_t seed) {
      manual_seed(seed);
      return SignalNet();
    }
    explicit SignalRun(bool graph) {
      net.to(testing::test_gpu());
      opt = std::make_unique<optim::SGD>(net.parameters(), optim::SgdOptions{.lr = 0.05, .momentum = 0.9});
      step = std::make_unique<optim::TrainStep>(
          [this](const Tensor& x, const Tensor& y) { return std::vector<Tensor>{cross_entropy(net(x), y)}; }, *opt,
          optim::TrainStepOptions{.cuda_graph = graph});
    }
  };
  SignalRun eager(false), graph(true);
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    CAPTURE(i);
    const Batch& b = signals[i % 3];
    const double e = (*eager.step)(b.x, b.y)[0].item(), g = (*graph.step)(b.x, b.y)[0].item();
    CHECK(e == g);
    (i == 0 ? first : last) = e;
  }
  CHECK(last < first);  // three fixed batches: 30 steps fit them
  CHECK(graph.step->stats().replays > 20);
  check_same_bits(eager.net.state_dict(), graph.net.state_dict());
}

LOOM_GPU_TEST_CASE("100 replayed steps over two shapes give the same bits as 100 eager steps") {
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  std::vector<Batch> full = batches(64, 4, 1), tail = batches(24, 2, 2);
  Run eager(false), graph(true);
  for (int i = 0; i < 100; ++i) {
    CAPTURE(i);
    const Batch& b = i % 5 == 4 ? tail[i % 2] : full[i % 4];  // the tail shape every 5th step
    const std::vector<Tensor>& e = (*eager.step)(b.x, b.y);
    const std::vector<Tensor>& g = (*graph.step)(b.x, b.y);
    CHECK(e[0].item() == g[0].item());
    check_same_bits(e[1], g[1]);
    eager.schedule->step();
    graph.schedule->step();
  }
  // Each shape's first step traces, its second runs the traced chains eagerly
  // (building their plans), its third captures twice (the second time into the
  // arena planned from the first's requests): both runs fuse alike.
  CHECK(graph.step->stats().captures == 4);
  CHECK(graph.step->stats().planned_captures == 2);
  CHECK(graph.step->stats().missed_plans == 0);
  CHECK(graph.step->stats().eager_steps == 4);
  CHECK(graph.step->stats().replays == 100 - 4);
  CHECK(eager.step->stats().replays == 0);
  check_same_bits(eager.net.state_dict(), graph.net.state_dict());
  check_same_bits(eager.opt->state_dict(), graph.opt->state_dict());
}

LOOM_GPU_TEST_CASE("under bf16 autocast, replayed steps give the same bits as eager steps") {
  // The weights are cast once per step, all together, inside the graph too.
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  AutocastGuard autocast(DType::BFloat16);
  std::vector<Batch> data = batches(64, 4, 3);
  Run eager(false), graph(true);
  for (int i = 0; i < 20; ++i) {
    CAPTURE(i);
    const std::vector<Tensor>& e = (*eager.step)(data[i % 4].x, data[i % 4].y);
    const std::vector<Tensor>& g = (*graph.step)(data[i % 4].x, data[i % 4].y);
    CHECK(e[0].item() == g[0].item());
    check_same_bits(e[1], g[1]);
  }
  CHECK(graph.step->stats().replays == 20 - 2);  // after the traced step and the chains' eager step
  check_same_bits(eager.net.state_dict(), graph.net.state_dict());
}

LOOM_GPU_TEST_CASE("under bf16 autocast, a step casts every weight in one launch, every gradient in one") {
  AutocastGuard autocast(DType::BFloat16);
  std::vector<Batch> data = batches(32, 2, 4);
  Run run(false);
  (*run.step)(data[0].x, data[0].y);  // the first step casts each weight where it is met
  for (int i = 1; i < 4; ++i) {
    CAPTURE(i);
    const int64_t before = cuda::convert_span_launches();
    (*run.step)(data[i % 2].x, data[i % 2].y);
    CHECK(cuda::convert_span_launches() - before == 2);
    for (const Tensor& p : run.net.parameters()) CHECK(p.grad().dtype() == DType::Float32);
  }
}

LOOM_GPU_TEST_CASE("a replayed step allocates nothing and leaves the allocator as it found it") {
  std::vector<Batch> data = batches(32, 2, 3);
  Run run(true);
  // traced step, the chains' eager step, capture (recorded, then planned)
  for (int i = 0; i < 3; ++i) (*run.step)(data[i % 2].x, data[i % 2].y);
  REQUIRE(run.step->last_step_replayed());
  const cuda::AllocatorStats before = cuda::stats();
  for (int i = 0; i < 20; ++i) (*run.step)(data[i % 2].x, data[i % 2].y);
  const cuda::AllocatorStats after = cuda::stats();
  CHECK(run.step->last_step_replayed());
  CHECK(after.num_allocs == before.num_allocs);
  CHECK(after.num_frees == before.num_frees);
  CHECK(after.num_cuda_mallocs == before.num_cuda_mallocs);
  CHECK(after.allocated_bytes == before.allocated_bytes);
}

LOOM_GPU_TEST_CASE("a capture keeps none of the eager steps' gradients or bf16 weight casts alive") {
  // The autocast region spans the steps, as a training loop's does: the warm-up
  // step's casts are still cached when the capture recasts the weights.
  AutocastGuard autocast(DType::BFloat16);
  std::vector<Batch> data = batches(32, 2, 5);
  Run run(true);
  // traced step, the chains' eager step, capture (recorded, then planned)
  for (int i = 0; i < 3; ++i) (*run.step)(data[i % 2].x, data[i % 2].y);
  REQUIRE(run.step->stats().captures == 2);
  cuda::reset_peak_stats();
  const cuda::MemoryBreakdown m = cuda::memory_breakdown(testing::test_gpu().index);
  // Held gradients and casts would be 1.5x the parameters' bytes (fp32 + bf16);
  // what may stay held is the optimizer's eager slot table, which the graph
  // replaces with its own (core/cuda/optim.cc): 1 KiB here.
  size_t param_bytes = 0;
  for (const Tensor& p : run.net.parameters()) param_bytes += static_cast<size_t>(p.numel()) * sizeof(float);
  CHECK(m.high_water[cuda::Purpose::HeldByCaptures] < param_bytes / 100);
}

LOOM_GPU_TEST_CASE("the optimizer's buffers and a graph's input slots come from the state pool, and only they") {
  std::vector<Batch> data = batches(32, 2, 6);
  const int device = testing::test_gpu().index;
  const auto state_pool = [device] {
    const std::vector<cuda::NamedPoolUsage> pools = cuda::pool_usage(device);
    REQUIRE(pools.at(1).name == "state");
    return pools.at(1).usage;
  };
  const size_t before = state_pool().allocated_bytes;
  {
    Run run(true);
    for (int i = 0; i < 3; ++i) (*run.step)(data[i % 2].x, data[i % 2].y);
    REQUIRE(run.step->stats().captures >= 1);
    // Adam's two buffers per parameter, x and y's slots; a block may keep a rest
    // of up to 1 MiB that was not worth splitting off (core/block_pool.h).
    size_t expected = cuda::round_block_size(static_cast<size_t>(data[0].x.numel()) * sizeof(float)) +
                      cuda::round_block_size(static_cast<size_t>(data[0].y.numel()) * sizeof(int64_t));
    size_t blocks = 2;
    for (const Tensor& p : run.net.parameters()) {
      expected += 2 * cuda::round_block_size(static_cast<size_t>(p.numel()) * sizeof(float));
      blocks += 2;
    }
    const size_t held = state_pool().allocated_bytes - before;
    CHECK(held >= expected);
    CHECK(held <= expected + blocks * cuda::kSmallLimit);
  }
  CHECK(state_pool().allocated_bytes == before);  // nothing else lives there
}

LOOM_GPU_TEST_CASE("a step that reads a value back cannot be captured: it runs eagerly, same results") {
  std::vector<Batch> data = batches(16, 2, 4);
  manual_seed(3);
  nn::Sequential net_a = nn::lenet5();
  manual_seed(3);
  nn::Sequential net_b = nn::lenet5();
  net_a.to(testing::test_gpu());
  net_b.to(testing::test_gpu());
  optim::SGD opt_a(net_a.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt_b(net_b.parameters(), {.lr = 0.05, .momentum = 0.9});
  std::vector<double> seen;
  optim::TrainStep syncing(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = cross_entropy(net_a(x), y);
        seen.push_back(loss.item());  // a host read: not capturable
        return std::vector<Tensor>{loss};
      },
      opt_a, {.trace_fusion = false});  // the reference loop below runs the ops as written
  NumericsGuard numerics({.deterministic = true});
  for (int i = 0; i < 4; ++i) {
    const Batch& b = data[i % 2];
    const std::vector<Tensor>& out = syncing(b.x, b.y);
    opt_b.zero_grad();
    Tensor loss = cross_entropy(net_b(b.x), b.y);
    loss.backward();
    opt_b.step();
    CHECK(out[0].item() == loss.item());
  }
  CHECK_FALSE(syncing.last_step_replayed());
  CHECK(syncing.stats().captures == 0);
  CHECK(syncing.fallback_reason().find("capturing the step failed") != std::string::npos);
  check_same_bits(net_a.state_dict(), net_b.state_dict());
}

// Dropout (default generator, and a generator of the model's own) inside a
// captured step: each replay draws fresh masks, the same bits as eager steps
// from the same generator states; the generators advance as eagerly.
LOOM_GPU_TEST_CASE("dropout inside a captured step draws fresh masks, the eager steps' bits") {
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  std::vector<Batch> data = batches(8, 1, 6);
  struct Dropping {
    nn::Sequential net;
    Generator own{99};
    std::unique_ptr<optim::SGD> opt;
    std::unique_ptr<optim::TrainStep> step;
    explicit Dropping(bool graph) {
      manual_seed(4);
      net = nn::Sequential(nn::Flatten(), nn::Dropout(0.5), nn::Linear(784, 32), nn::ReLU(),
                           nn::Linear(32, 10));
      net.to(testing::test_gpu());
      opt = std::make_unique<optim::SGD>(net.parameters(), optim::SgdOptions{.lr = 0.1});
      step = std::make_unique<optim::TrainStep>(
          [this](const Tensor& x, const Tensor& y) {
            Tensor h = dropout(net(x), 0.3, true, &own);  // a generator of its own too
            return std::vector<Tensor>{cross_entropy(h, y)};
          },
          *opt, optim::TrainStepOptions{.cuda_graph = graph});
    }
  };
  std::vector<double> losses[2];
  uint64_t offsets[2] = {0, 0}, own_offsets[2] = {0, 0};
  for (int graph = 0; graph < 2; ++graph) {
    Dropping run(graph == 1);
    manual_seed(4);  // the same default-generator state for both runs
    for (int i = 0; i < 6; ++i) losses[graph].push_back((*run.step)(data[0].x, data[0].y)[0].item());
    if (graph == 1) {
      CHECK(run.step->last_step_replayed());
      CHECK(run.step->stats().replays >= 4);
    }
    offsets[graph] = default_generator().offset();
    own_offsets[graph] = run.own.offset();
  }
  for (size_t i = 0; i < losses[0].size(); ++i) {
    CAPTURE(i);
    CHECK(losses[1][i] == losses[0][i]);
  }
  CHECK(offsets[1] == offsets[0]);
  CHECK(own_offsets[1] == own_offsets[0]);
  CHECK(losses[1][4] != losses[1][5]);  // new masks (and new weights) each replay
}

LOOM_GPU_TEST_CASE("randn_like and rand inside a captured step draw fresh numbers, the eager steps' bits") {
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  std::vector<Batch> data = batches(8, 1, 7);
  struct Noisy {
    nn::Sequential net;
    std::unique_ptr<optim::SGD> opt;
    std::unique_ptr<optim::TrainStep> step;
    explicit Noisy(bool graph) {
      manual_seed(5);
      net = nn::Sequential(nn::Flatten(), nn::Linear(784, 32), nn::ReLU(), nn::Linear(32, 10));
      net.to(testing::test_gpu());
      opt = std::make_unique<optim::SGD>(net.parameters(), optim::SgdOptions{.lr = 0.1});
      step = std::make_unique<optim::TrainStep>(
          [this](const Tensor& x, const Tensor& y) {
            const Tensor logits = net(x + randn_like(x) * 0.1);  // input noise, as a denoising model adds
            const Tensor scale = rand({logits.size(0), 1}, {.device = logits.device()}) + 0.5;
            return std::vector<Tensor>{cross_entropy(logits * scale, y)};
          },
          *opt, optim::TrainStepOptions{.cuda_graph = graph});
    }
  };
  std::vector<double> losses[2];
  uint64_t offsets[2] = {0, 0};
  for (int graph = 0; graph < 2; ++graph) {
    Noisy run(graph == 1);
    manual_seed(6);  // the same default-generator state for both runs
    for (int i = 0; i < 6; ++i) losses[graph].push_back((*run.step)(data[0].x, data[0].y)[0].item());
    if (graph == 1) {
      CHECK_MESSAGE(run.step->last_step_replayed(), run.step->fallback_reason());
      CHECK(run.step->stats().replays >= 4);
    }
    offsets[graph] = default_generator().offset();
  }
  for (size_t i = 0; i < losses[0].size(); ++i) {
    CAPTURE(i);
    CHECK(losses[1][i] == losses[0][i]);
  }
  CHECK(offsets[1] == offsets[0]);
  CHECK(losses[1][4] != losses[1][5]);
}

LOOM_GPU_TEST_CASE("a bad label inside a replayed step gives a NaN loss, not a crash") {
  std::vector<Batch> data = batches(8, 1, 5);
  Run run(true);
  for (int i = 0; i < 3; ++i) (*run.step)(data[0].x, data[0].y);
  REQUIRE(run.step->last_step_replayed());
  Tensor bad = data[0].y.clone();
  bad.narrow(0, 3, 1).fill_(12.0);
  const std::vector<Tensor>& out = (*run.step)(data[0].x, bad);
  CHECK(std::isnan(out[0].item()));
}

LOOM_GPU_TEST_CASE("a replayed step with a bad label skips its update on the device and is counted") {
  std::vector<Batch> data = batches(8, 2, 5);
  Run run(true);
  for (int i = 0; i < 3; ++i) (*run.step)(data[0].x, data[0].y);  // warm-up, capture, replay
  REQUIRE(run.step->last_step_replayed());
  CHECK(run.step->nonfinite_steps().skipped == 0);
  auto snapshot = [](const StateDict& state) {
    StateDict copy;
    for (const auto& [name, t] : state) copy.emplace_back(name, t.cpu().clone());
    return copy;
  };
  // Parameters only: the forward still blends batch norm's running statistics,
  // as PyTorch's does in a step whose loss turns out NaN.
  const StateDict weights = snapshot(run.net.named_parameters());
  const StateDict moments = snapshot(run.opt->state_dict());
  Tensor bad = data[0].y.clone();
  bad.narrow(0, 3, 1).fill_(12.0);
  const std::vector<Tensor>& out = (*run.step)(data[0].x, bad);
  REQUIRE(run.step->last_step_replayed());
  CHECK(std::isnan(out[0].item()));
  const StateDict after = run.net.named_parameters();
  for (size_t k = 0; k < after.size(); ++k) {
    CAPTURE(after[k].first);
    check_same_bits(after[k].second, weights[k].second);
  }
  const StateDict moments_after = run.opt->state_dict();
  for (size_t k = 0; k < moments_after.size(); ++k) {
    CAPTURE(moments_after[k].first);
    if (moments_after[k].first.ends_with(".step")) continue;  // the host half counted the step
    check_same_bits(moments_after[k].second, moments[k].second);
  }
  const optim::NonFiniteSteps skipped = run.step->nonfinite_steps();
  CHECK(skipped.skipped == 1);
  CHECK(skipped.first == 4);
  // The next good step updates again, from the weights before the bad one.
  const double loss = (*run.step)(data[0].x, data[0].y)[0].item();
  CHECK(std::isfinite(loss));
  CHECK(run.step->nonfinite_steps().skipped == 1);
  CHECK_FALSE(testing::close_report(run.net.named_parameters()[0].second.cpu(), weights[0].second, 0, 0).empty());
}

LOOM_GPU_TEST_CASE("empty batches between full ones, captured too: a NaN loss, no update, the eager steps' bits") {
  // Zero-size ops inside a capture: convolutions and norms run no kernel, the
  // loss is the mean of nothing, and the update is skipped on the device.
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  std::vector<Batch> full = batches(32, 2, 1), none = batches(0, 1, 3);
  Run eager(false), graph(true);
  for (int i = 0; i < 12; ++i) {
    CAPTURE(i);
    const bool empty = i % 3 == 2;  // each shape traces, runs eagerly, captures, then replays
    const Batch& b = empty ? none[0] : full[i % 2];
    const std::vector<Tensor>& e = (*eager.step)(b.x, b.y);
    const std::vector<Tensor>& g = (*graph.step)(b.x, b.y);
    const double eager_loss = e[0].item(), graph_loss = g[0].item();
    CHECK(std::isnan(graph_loss) == empty);
    CHECK(std::isnan(eager_loss) == empty);
    if (!empty) CHECK(eager_loss == graph_loss);
    CHECK(g[1].sizes() == Shape{b.x.size(0), 10});
    check_same_bits(e[1], g[1]);
  }
  CHECK(graph.step->nonfinite_steps().skipped == 4);
  CHECK(eager.step->nonfinite_steps().skipped == 4);
  CHECK(graph.step->stats().eager_steps == 4);  // the first two of each shape; the rest replay
  CHECK(graph.step->stats().replays == 12 - 4);
  check_same_bits(eager.net.state_dict(), graph.net.state_dict());
}

LOOM_GPU_TEST_CASE("an eager GPU step with a non-finite loss skips too; skip_nonfinite = false does not") {
  std::vector<Batch> data = batches(8, 1, 8);
  for (bool skip : {true, false}) {
    CAPTURE(skip);
    manual_seed(7);
    nn::Sequential net = nn::mnist_net();
    net.to(testing::test_gpu());
    optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::TrainStep step(
        [&](const Tensor& x, const Tensor& y) { return std::vector<Tensor>{cross_entropy(net(x), y)}; },
        opt, {.cuda_graph = false, .skip_nonfinite = skip});
    step(data[0].x, data[0].y);
    Tensor poisoned = data[0].x.clone();
    poisoned.narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
    const Tensor before = net.state_dict()[0].second.cpu().clone();
    step(poisoned, data[0].y);
    const Tensor after = net.state_dict()[0].second.cpu();
    if (skip) {
      check_same_bits(after, before);
      CHECK(step.nonfinite_steps().skipped == 1);
      CHECK(step.nonfinite_steps().first == 2);
    } else {
      CHECK(std::isnan(sum(after).item()));
      CHECK(step.nonfinite_steps().skipped == 0);
    }
  }
}

#endif  // LOOM_WITH_CUDA
