// File: tests/core/ops/gpu_coverage_gpu_test.cc
// Configurations users hit on the H100 that once failed: wrong fused BN+ReLU
// gradients at channel counts divisible by 4 but not 8, batch-norm training
// with no cuDNN engine (29 or 43 channels), a 1x1 channels-last average-pool
// backward with no engine, and a strict-fp32 weight gradient that an engine
// without a numerical note computed below fp32. Each runs through the public
// ops or layers and is compared with float64 on the CPU.
//
// N batch, C channels, H, W input, K out channels, R filter.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include "core/cudnn/plan_cache.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/sgd.h"
#include "tests/core/ops/parity_sweep.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// conv2d -> batch_norm_relu (fused) -> max_pool2d -> linear -> cross_entropy, channels-last.
sweep::Case chain(Precision precision, std::map<std::string, int64_t> ints) {
  sweep::Case c;
  c.seed = 9;
  c.op = sweep::Op::Chain;
  c.precision = precision;
  c.deterministic = false;
  c.channels_last = true;
  c.fused = true;
  c.ints = std::move(ints);
  return c;
}

void check_case(const sweep::Case& c) {
  CAPTURE(c.describe());
  const sweep::Outcome outcome = sweep::run_case(c, testing::test_gpu());
  CAPTURE(outcome.worst_tensor);
  CAPTURE(outcome.worst_error);
  CAPTURE(outcome.allowed_error);
  CHECK(outcome.failure == "");
  CHECK(outcome.passed());
}

int64_t fallback_runs() { return cudnn::PlanCache::global().stats().fallback_runs; }

// Trains a copy of `model` for `steps` SGD steps on the GPU and on the CPU (same
// weights, same batches) and checks the losses and final weights agree.
void check_trains_like_the_cpu(nn::Module& cpu_model, nn::Module& gpu_model, const Shape& input,
                               int64_t classes) {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  gpu_model.load_state_dict(cpu_model.state_dict());
  gpu_model.to(testing::test_gpu());
  optim::SGD cpu_opt(cpu_model.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD gpu_opt(gpu_model.parameters(), {.lr = 0.05, .momentum = 0.9});
  Generator gen(4);
  const int64_t fallbacks_before = fallback_runs();
  double first_loss = 0, last_loss = 0;
  // One batch, so the loss must fall as the model fits it.
  Tensor x = randn(input, {}, &gen);
  Tensor target = randint(0, classes, {input[0]}, {.dtype = DType::Int64}, &gen);
  for (int step = 0; step < 8; ++step) {
    cpu_opt.zero_grad();
    Tensor cpu_loss = cross_entropy(cpu_model.forward(x), target);
    cpu_loss.backward();
    cpu_opt.step();
    gpu_opt.zero_grad();
    Tensor gpu_loss = cross_entropy(gpu_model.forward(x.to(testing::test_gpu())), target.to(testing::test_gpu()));
    gpu_loss.backward();
    gpu_opt.step();
    CHECK(gpu_loss.item() == doctest::Approx(cpu_loss.item()).epsilon(1e-3));
    (step == 0 ? first_loss : last_loss) = gpu_loss.item();
  }
  CHECK(last_loss < first_loss);
  CHECK(fallback_runs() > fallbacks_before);  // the batch norm ran below cuDNN
  const auto cpu_state = cpu_model.state_dict(), gpu_state = gpu_model.state_dict();
  REQUIRE(cpu_state.size() == gpu_state.size());
  for (size_t i = 0; i < cpu_state.size(); ++i) {
    CAPTURE(cpu_state[i].first);
    CHECK(gpu_state[i].first == cpu_state[i].first);
    CHECK_CLOSE(gpu_state[i].second.cpu(), cpu_state[i].second, 1e-3, 1e-4);
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("fused BN+ReLU gradients at 12 channels, strict fp32") {
  check_case(chain(Precision::StrictFp32,
                   {{"N", 13}, {"C", 2}, {"H", 18}, {"W", 20}, {"K", 12}, {"R", 3}, {"pad", 1},
                    {"classes", 10}, {"bias", 1}}));
}

LOOM_GPU_TEST_CASE("fused BN+ReLU gradients at 28 channels, tf32") {
  check_case(chain(Precision::Tf32,
                   {{"N", 16}, {"C", 1}, {"H", 19}, {"W", 4}, {"K", 28}, {"R", 5}, {"pad", 1},
                    {"classes", 10}, {"bias", 1}}));
}

LOOM_GPU_TEST_CASE("fused BN+ReLU gradients for every channel count 1-33, NHWC") {
  for (int64_t k = 1; k <= 33; ++k) {
    check_case(chain(Precision::StrictFp32, {{"N", 4}, {"C", 3}, {"H", 8}, {"W", 6}, {"K", k}, {"R", 3},
                                       {"pad", 1}, {"classes", 5}, {"bias", 0}}));
  }
}

LOOM_GPU_TEST_CASE("a BatchNorm2d(29) model trains on the GPU as on the CPU") {
  nn::Sequential cpu_model(nn::Conv2d(3, 29, 3, {.padding = {1, 1}}), nn::BatchNorm2d(29), nn::ReLU(),
                           nn::Flatten(), nn::Linear(29 * 6 * 6, 7));
  nn::Sequential gpu_model(nn::Conv2d(3, 29, 3, {.padding = {1, 1}}), nn::BatchNorm2d(29), nn::ReLU(),
                           nn::Flatten(), nn::Linear(29 * 6 * 6, 7));
  check_trains_like_the_cpu(cpu_model, gpu_model, {16, 3, 6, 6}, 7);
}

LOOM_GPU_TEST_CASE("a Linear -> BatchNorm1d(43) -> ReLU model trains on the GPU as on the CPU") {
  nn::Sequential cpu_model(nn::Linear(20, 43), nn::BatchNorm1d(43), nn::ReLU(), nn::Linear(43, 5));
  nn::Sequential gpu_model(nn::Linear(20, 43), nn::BatchNorm1d(43), nn::ReLU(), nn::Linear(43, 5));
  check_trains_like_the_cpu(cpu_model, gpu_model, {32, 20}, 5);
}

LOOM_GPU_TEST_CASE("a 1x1 channels-last average pool has a backward on the GPU") {
  Generator gen(12);
  for (const auto& [shape, stride] : {std::pair{Shape{6, 26, 25, 14}, std::array<int64_t, 2>{1, 3}},
                                      std::pair{Shape{4, 45, 34, 30}, std::array<int64_t, 2>{1, 1}}}) {
    Tensor x = randn(shape, {.dtype = DType::Float64}, &gen);
    Tensor xr = x.clone().requires_grad_(true);
    Tensor xg = x.to(DType::Float32).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
    xg.requires_grad_(true);
    const Pool2dOptions options{.kernel_size = {1, 1}, .stride = stride};
    Tensor dy = randn(avg_pool2d(x, options).sizes(), {.dtype = DType::Float64}, &gen);
    sum(mul(avg_pool2d(xr, options), dy)).backward();
    sum(mul(avg_pool2d(xg, options), dy.to(DType::Float32).to(testing::test_gpu()))).backward();
    CHECK_CLOSE(xg.grad().to(DType::Float64).cpu(), xr.grad(), 1e-5, 1e-6);
  }
}

LOOM_GPU_TEST_CASE("strict fp32 keeps the weight gradient at fp32 accuracy") {
  NumericsGuard strict({.precision = Precision::StrictFp32, .deterministic = false});
  Generator gen(21);
  Tensor x = randn({12, 30, 24, 6}, {.dtype = DType::Float64}, &gen);
  Tensor w = randn({49, 30, 5, 5}, {.dtype = DType::Float64}, &gen);
  Tensor b = randn({49}, {.dtype = DType::Float64}, &gen);
  const Conv2dOptions options{.padding = {2, 2}};
  Tensor dy = randn({12, 49, 24, 6}, {.dtype = DType::Float64}, &gen);
  Tensor wr = w.clone().requires_grad_(true);
  sum(mul(conv2d(x, wr, b, options), dy)).backward();
  auto gpu = [](const Tensor& t) {
    Tensor g = t.to(DType::Float32).to(testing::test_gpu());
    return t.dim() == 4 ? g.contiguous(MemoryFormat::ChannelsLast) : g;
  };
  Tensor wg = gpu(w).requires_grad_(true);
  sum(mul(conv2d(gpu(x), wg, gpu(b), options), gpu(dy))).backward();
  CHECK(sweep::relative_error(wg.grad().to(DType::Float64).cpu(), wr.grad()) <= 1e-4);
}
#endif
