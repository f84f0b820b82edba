// File: tests/optim/multi_gpu_gpu_test.cc
// Two GPUs in one process: tensors move between them with their values and
// gradients, ops that mix them are DeviceErrors, models train on cuda:1 as on
// cuda:0 (eagerly, in a captured bf16 TrainStep, on two threads at once), a
// checkpoint saved from cuda:1 loads onto cuda:0, the data loader stages for
// cuda:1, and the allocator keeps each GPU's memory apart. The thread's
// current device stays cuda:0 throughout: everything follows the tensors.
// Skipped where fewer than two GPUs are usable.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/autocast.h"
#include "core/checkpoint.h"
#include "core/cuda/allocator.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "data/dataloader.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "optim/train_step.h"
#include "tests/testing.h"

using namespace loom;

namespace {

#define LOOM_TWO_GPU_TEST_CASE(name) TEST_CASE(name * doctest::skip(cuda_device_count() < 2))

const Device kGpu0 = Device::cuda(0);
const Device kGpu1 = Device::cuda(1);

// x (B, 3, 12, 12) -> logits (B, 5): conv, batch norm, ReLU, pool, linear.
std::shared_ptr<nn::Sequential> make_net(Device device) {
  manual_seed(11);
  auto net = std::make_shared<nn::Sequential>(
      nn::Conv2d(3, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
      nn::Flatten(), nn::Linear(8 * 6 * 6, 5));
  net->to(device);
  net->to(MemoryFormat::ChannelsLast);
  return net;
}

struct Batch {
  Tensor x, y;
};

Batch batch(int step, Device device) {
  Generator gen(100 + step);
  return {randn({16, 3, 12, 12}, {}, &gen).to(device).contiguous(MemoryFormat::ChannelsLast),
          randint(0, 5, {16}, {.dtype = DType::Int64}, &gen).to(device)};
}

// `steps` SGD steps of `net` on its device; the parameters after them, on the CPU.
std::vector<Tensor> train(nn::Module& net, Device device, int steps) {
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < steps; ++step) {
    Batch b = batch(step, device);
    opt.zero_grad();
    cross_entropy(net(b.x), b.y).backward();
    opt.step();
  }
  std::vector<Tensor> params;
  for (const Tensor& p : net.parameters()) params.push_back(p.cpu());
  return params;
}

// Equal up to summation order: each GPU times its own strict-fp32 engine
// candidates and may keep another one (seen on two H200s: ulp-level
// differences after three steps), as two runs of PyTorch with cudnn.benchmark may.
void check_same(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    CAPTURE(i);
    CHECK_CLOSE(actual[i], expected[i], 1e-5, 1e-6);
  }
}

}  // namespace

LOOM_TWO_GPU_TEST_CASE("tensors move between GPUs with their values, layouts, dtypes and gradients") {
  Generator gen(1);
  const Tensor host = randn({4, 3, 5, 7}, {}, &gen);
  Tensor a = host.to(kGpu0).contiguous(MemoryFormat::ChannelsLast);
  Tensor b = a.to(kGpu1);
  CHECK(b.device() == kGpu1);
  CHECK(b.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(b.cpu(), host, 0, 0);
  // Into a strided destination of another dtype on the other GPU.
  Tensor wide = empty({4, 3, 7, 5}, {.dtype = DType::Float64, .device = kGpu0}).transpose(2, 3);
  wide.copy_(b);
  CHECK_CLOSE(wide.cpu(), host.to(DType::Float64), 0, 0);
  // The gradient of a move goes back to the source GPU.
  Tensor w = randn({7}, {.device = kGpu0, .requires_grad = true}, &gen);
  sum(w.to(kGpu1) * b).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().device() == kGpu0);
  CHECK_CLOSE(w.grad().cpu(), sum(host, {0, 1, 2}), 1e-5, 1e-5);
  CHECK(current_cuda_device() == kGpu0);
}

LOOM_TWO_GPU_TEST_CASE("ops that mix two GPUs are DeviceErrors naming both") {
  Tensor a = ones({2, 3, 4, 4}, {.device = kGpu0});
  Tensor b = ones({2, 3, 4, 4}, {.device = kGpu1});
  CHECK_THROWS_WITH_FRAGMENT(a + b, DeviceError, "cuda:0 and cuda:1");
  CHECK_THROWS_WITH_FRAGMENT(conv2d(a, ones({4, 3, 3, 3}, {.device = kGpu1})), DeviceError,
                             "cuda:1");
  CHECK_THROWS_WITH_FRAGMENT(linear(ones({2, 3}, {.device = kGpu0}), ones({4, 3}, {.device = kGpu1})),
                             DeviceError, "cuda:1");
  CHECK_THROWS_WITH_FRAGMENT(cat({a, b}, 0), DeviceError, "cuda:1");
  CHECK_THROWS_WITH_FRAGMENT(
      cross_entropy(ones({2, 5}, {.device = kGpu0}), zeros({2}, {.dtype = DType::Int64, .device = kGpu1})),
      DeviceError, "cuda:1");
}

LOOM_TWO_GPU_TEST_CASE("a model on cuda:1 trains as the same model on cuda:0") {
  NumericsGuard exact({.precision = Precision::StrictFp32, .deterministic = true});
  auto net0 = make_net(kGpu0);
  auto net1 = make_net(kGpu1);
  const std::vector<Tensor> on0 = train(*net0, kGpu0, 3);
  const std::vector<Tensor> on1 = train(*net1, kGpu1, 3);
  check_same(on1, on0);
  CHECK(current_cuda_device() == kGpu0);
  // Each GPU's memory is its own.
  CHECK(cuda::stats(1).allocated_bytes > 0);
  const size_t before = cuda::stats(0).allocated_bytes;
  Tensor more = empty({1 << 20}, {.device = kGpu1});
  CHECK(cuda::stats(0).allocated_bytes == before);
}

LOOM_TWO_GPU_TEST_CASE("two threads train on two GPUs at once, each as alone") {
  NumericsGuard exact({.precision = Precision::StrictFp32, .deterministic = true});
  const std::vector<Tensor> alone = train(*make_net(kGpu0), kGpu0, 3);
  std::vector<Tensor> on1;
  std::exception_ptr failure;
  auto net1 = make_net(kGpu1);
  auto net0 = make_net(kGpu0);
  std::thread worker([&] {
    try {
      NumericsGuard policy({.precision = Precision::StrictFp32, .deterministic = true});
      on1 = train(*net1, kGpu1, 3);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  const std::vector<Tensor> on0 = train(*net0, kGpu0, 3);
  worker.join();
  if (failure) std::rethrow_exception(failure);
  check_same(on0, alone);
  check_same(on1, alone);
}

LOOM_TWO_GPU_TEST_CASE("a captured bf16 TrainStep on cuda:1 replays as on cuda:0") {
  NumericsGuard policy({.precision = Precision::Bf16, .deterministic = true});
  std::vector<std::vector<double>> losses(2);
  std::vector<std::vector<Tensor>> params(2);
  for (int d = 0; d < 2; ++d) {
    const Device device = Device::cuda(d);
    auto net = make_net(device);
    optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
    optim::TrainStep step(
        [&](const Tensor& x, const Tensor& y) {
          AutocastGuard autocast(DType::BFloat16);
          return std::vector<Tensor>{cross_entropy((*net)(x), y)};
        },
        opt);
    for (int i = 0; i < 6; ++i) {
      Batch b = batch(i, device);
      losses[d].push_back(step(b.x, b.y).front().item());
    }
    CHECK(step.stats().replays >= 3);
    for (const Tensor& p : net->parameters()) params[d].push_back(p.cpu());
  }
  for (size_t i = 0; i < losses[0].size(); ++i) {
    CHECK(losses[1][i] == doctest::Approx(losses[0][i]).epsilon(1e-5));
  }
  check_same(params[1], params[0]);
}

LOOM_TWO_GPU_TEST_CASE("a checkpoint saved from cuda:1 loads onto cuda:0 and resumes there") {
  auto net1 = make_net(kGpu1);
  optim::SGD opt1(net1->parameters(), {.lr = 0.1, .momentum = 0.9});
  Batch b1 = batch(0, kGpu1);
  cross_entropy((*net1)(b1.x), b1.y).backward();
  opt1.step();
  const std::string path =
      (std::filesystem::temp_directory_path() / "loom_multi_gpu_test.ckpt").string();
  save_checkpoint(path, {.model = net1->state_dict(), .optimizer = opt1.state_dict(), .epoch = 1});
  TrainingCheckpoint loaded = load_checkpoint(path, kGpu0);
  std::filesystem::remove(path);
  for (const auto& [name, t] : loaded.model) CHECK(t.device() == kGpu0);
  auto net0 = make_net(kGpu0);
  net0->load_state_dict(loaded.model);
  optim::SGD opt0(net0->parameters(), {.lr = 0.1, .momentum = 0.9});
  opt0.load_state_dict(loaded.optimizer);
  StateDict expected = net1->state_dict(), actual = net0->state_dict();
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    CAPTURE(actual[i].first);
    CHECK(actual[i].second.device() == kGpu0);
    CHECK_CLOSE(actual[i].second.cpu(), expected[i].second.cpu(), 0, 0);
  }
  // One more step on each GPU from the same state gives the same parameters.
  NumericsGuard exact({.precision = Precision::StrictFp32, .deterministic = true});
  for (auto [net, opt, device] : {std::tuple{net0.get(), &opt0, kGpu0},
                                  std::tuple{net1.get(), &opt1, kGpu1}}) {
    Batch b = batch(1, device);
    opt->zero_grad();
    cross_entropy((*net)(b.x), b.y).backward();
    opt->step();
  }
  std::vector<Tensor> p0, p1;
  for (const Tensor& p : net0->parameters()) p0.push_back(p.cpu());
  for (const Tensor& p : net1->parameters()) p1.push_back(p.cpu());
  check_same(p0, p1);
}

LOOM_TWO_GPU_TEST_CASE("the data loader stages and gathers batches on cuda:1") {
  Generator gen(5);
  data::Dataset set{randint(0, 256, {40, 3, 8, 8}, {.dtype = DType::UInt8}, &gen),
                    randint(0, 4, {40}, {.dtype = DType::Int64}, &gen)};
  const data::DataLoaderOptions on_cpu{.batch_size = 16, .shuffle = true, .seed = 9};
  data::DataLoaderOptions staged = on_cpu;
  staged.device = kGpu1;
  staged.num_workers = 2;
  std::vector<data::Batch> expected;
  data::DataLoader reference(set, on_cpu);
  for (const data::Batch& b : reference) expected.push_back(b);
  auto check_loader = [&](data::DataLoader& loader) {
    size_t i = 0;
    for (const data::Batch& b : loader) {
      REQUIRE(i < expected.size());
      CHECK(b.x.device() == kGpu1);
      CHECK(b.y.device() == kGpu1);
      CHECK_CLOSE(b.x.cpu(), expected[i].x, 0, 0);
      CHECK(b.y.cpu().to_vector<int64_t>() == expected[i].y.to_vector<int64_t>());
      ++i;
    }
    CHECK(i == expected.size());
  };
  data::DataLoader pinned(set, staged);  // host workers, pinned staging, copies to cuda:1
  check_loader(pinned);
  data::DataLoader resident = data::DataLoader::resident(set, staged);  // gathered on cuda:1
  check_loader(resident);
  CHECK(current_cuda_device() == kGpu0);
}

LOOM_TWO_GPU_TEST_CASE("random draws on cuda:1 equal cuda:0's and the CPU's") {
  for (Device device : {Device::cpu(), kGpu0, kGpu1}) {
    CAPTURE(device.str());
    Generator gen(42);
    Tensor u = rand({1000}, {.device = device}, &gen);
    Generator ref(42);
    CHECK_CLOSE(u.cpu(), rand({1000}, {}, &ref), 0, 0);
    Generator drop(3);
    Tensor x = ones({64, 32}, {.device = device});
    Tensor y = dropout(x, 0.5, true, &drop);
    Generator drop_ref(3);
    CHECK_CLOSE(y.cpu(), dropout(ones({64, 32}), 0.5, true, &drop_ref), 0, 0);
  }
}

#endif  // LOOM_WITH_CUDA
