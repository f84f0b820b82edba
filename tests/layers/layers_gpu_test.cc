// File: tests/layers/layers_gpu_test.cc
// mnist_net moved to the GPU with to(Device) computes what the CPU copy of the
// same weights computes: logits, loss, every parameter's gradient and the
// BatchNorm buffers, under strict fp32 (within 1e-4), in NCHW and channels-last.
// nn::init's draws on the GPU: in place, layout and dtype kept, their moments.
// Conv2d's padding=same and padding_mode on the GPU, fused and not, against the CPU.
// N batch.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/generator.h"
#include "core/ops/fusion_trace.h"
#include "core/ops/ops.h"
#include "layers/conv.h"
#include "layers/nn.h"
#include "tests/testing.h"

namespace loom {
namespace {

constexpr double kTol = 1e-4;

struct Batch {
  Tensor x;  // (N, 1, 28, 28)
  Tensor y;  // (N) int64
};

Batch make_batch(uint64_t seed) {
  Generator gen(seed);
  return {randn({16, 1, 28, 28}, {}, &gen), randint(0, 10, {16}, {.dtype = DType::Int64}, &gen)};
}

// Two mnist_nets with the same weights, the second on the GPU.
struct Twins {
  nn::Sequential cpu = nn::mnist_net();
  nn::Sequential gpu = nn::mnist_net();
  Twins() {
    gpu.load_state_dict(cpu.state_dict());
    gpu.to(testing::test_gpu());
  }
};

void check_step(Twins& nets, const Batch& batch, MemoryFormat format) {
  CAPTURE(std::string(memory_format_name(format)));
  const Tensor gpu_x = batch.x.to(testing::test_gpu()).contiguous(format);
  const Tensor cpu_logits = nets.cpu(batch.x), gpu_logits = nets.gpu(gpu_x);
  REQUIRE(gpu_logits.device().is_cuda());
  CHECK_CLOSE(gpu_logits.cpu(), cpu_logits, kTol, kTol);
  const Tensor cpu_loss = cross_entropy(cpu_logits, batch.y);
  const Tensor gpu_loss = cross_entropy(gpu_logits, batch.y.to(testing::test_gpu()));
  CHECK_CLOSE(gpu_loss.cpu(), cpu_loss, kTol, kTol);
  nets.cpu.zero_grad();
  nets.gpu.zero_grad();
  cpu_loss.backward();
  gpu_loss.backward();
  const nn::NamedTensors cpu_params = nets.cpu.named_parameters();
  const nn::NamedTensors gpu_params = nets.gpu.named_parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    CAPTURE(cpu_params[i].first);
    REQUIRE(gpu_params[i].second.grad().defined());
    CHECK(gpu_params[i].second.grad().device().is_cuda());
    CHECK_CLOSE(gpu_params[i].second.grad().cpu(), cpu_params[i].second.grad(), kTol, kTol);
  }
  const StateDict cpu_state = nets.cpu.state_dict(), gpu_state = nets.gpu.state_dict();
  for (size_t i = 0; i < cpu_state.size(); ++i) {
    CAPTURE(cpu_state[i].first);
    CHECK_CLOSE(gpu_state[i].second.cpu(), cpu_state[i].second, kTol, kTol);
  }
}

LOOM_GPU_TEST_CASE("nn::init fills GPU tensors in place, in their layout and dtype, with the draws' moments") {
  Generator gen(4);
  Tensor w = empty({64, 32, 3, 3}, {.device = testing::test_gpu()}).contiguous(MemoryFormat::ChannelsLast);
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU, &gen);
  CHECK(w.device() == testing::test_gpu());
  CHECK(w.is_contiguous(MemoryFormat::ChannelsLast));
  const testing::Moments kaiming = testing::moments(w);
  CHECK(std::abs(kaiming.mean) < 0.003);
  CHECK(kaiming.var == doctest::Approx(2.0 / 576).epsilon(0.05));
  Tensor p = empty({100, 200}, {.dtype = DType::BFloat16, .device = testing::test_gpu()});
  nn::init::trunc_normal_(p, 0.0, 1.0, -2.0, 2.0, &gen);
  CHECK(p.dtype() == DType::BFloat16);
  const testing::Moments truncated = testing::moments(p);
  CHECK(truncated.min >= -2.0);
  CHECK(truncated.max <= 2.0);
  CHECK(std::abs(truncated.mean) < 0.03);
  CHECK(truncated.var == doctest::Approx(0.773741).epsilon(0.04));
  nn::init::xavier_uniform_(p, 1.0, &gen);
  CHECK(testing::moments(p).var == doctest::Approx(2.0 / 300).epsilon(0.04));  // bound^2 / 3, bound sqrt(6 / 300)
}

// Convolutions that pad their input first (padding=same with even filters,
// reflect, replicate), plain and through nn::fuse's cuDNN blocks, in both layouts.
LOOM_GPU_TEST_CASE("Conv2d padding=same and padding_mode on the GPU match the CPU, fused and unfused") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  auto make = [] {
    return nn::Sequential(nn::Conv2d(3, 8, 4, {.padding = nn::Padding::Same}), nn::BatchNorm2d(8), nn::ReLU(),
                          nn::Conv2d(8, 4, 3, {.padding = 1, .padding_mode = PadMode::Reflect}), nn::ReLU(),
                          nn::Conv2d(4, 4, {2, 3}, {.padding = nn::Padding::Same, .padding_mode = PadMode::Replicate}));
  };
  Generator gen(7);
  const Tensor x = randn({2, 3, 9, 7}, {}, &gen);
  for (bool fused : {false, true}) {
    for (MemoryFormat format : testing::kParityLayouts) {
      CAPTURE(fused);
      CAPTURE(std::string(memory_format_name(format)));
      nn::Sequential cpu = make(), gpu = make();
      gpu.load_state_dict(cpu.state_dict());
      gpu.to(testing::test_gpu());
      if (fused) nn::fuse(gpu);
      const Tensor y = cpu(x), gpu_y = gpu(x.to(testing::test_gpu()).contiguous(format));
      REQUIRE(gpu_y.sizes() == Shape{2, 4, 9, 7});
      CHECK_CLOSE(gpu_y.cpu(), y, kTol, kTol);
      const Tensor dy = randn(y.sizes(), {}, &gen);
      y.backward(dy);
      gpu_y.backward(dy.to(testing::test_gpu()));
      const nn::NamedTensors cpu_params = cpu.named_parameters(), gpu_params = gpu.named_parameters();
      for (size_t i = 0; i < cpu_params.size(); ++i) {
        CAPTURE(cpu_params[i].first);
        REQUIRE(gpu_params[i].second.grad().defined());
        CHECK_CLOSE(gpu_params[i].second.grad().cpu(), cpu_params[i].second.grad(), kTol, kTol);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("mnist_net on the GPU matches its CPU twin, forward and backward") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  manual_seed(0);
  Twins nets;
  for (const auto& [name, t] : nets.gpu.state_dict()) {
    CAPTURE(name);
    CHECK(t.device().is_cuda());
  }
  check_step(nets, make_batch(1), MemoryFormat::Contiguous);
  check_step(nets, make_batch(2), MemoryFormat::Contiguous);  // running stats moved once already
  CHECK(nets.gpu.at<nn::BatchNorm2d>(5).num_batches_tracked().cpu().item() == 2);
  nets.cpu.eval();
  nets.gpu.eval();
  const Batch batch = make_batch(3);
  CHECK_CLOSE(nets.gpu(batch.x.to(testing::test_gpu())).cpu(), nets.cpu(batch.x), kTol, kTol);
}

LOOM_GPU_TEST_CASE("mnist_net in channels-last on the GPU matches its CPU twin") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  manual_seed(1);
  Twins nets;
  nets.gpu.to(MemoryFormat::ChannelsLast);
  CHECK(nets.gpu.at<nn::Conv2d>(4).weight().is_contiguous(MemoryFormat::ChannelsLast));
  check_step(nets, make_batch(4), MemoryFormat::ChannelsLast);
}

LOOM_GPU_TEST_CASE("to(Device) moves tensors an optimizer already holds, grads included") {
  manual_seed(2);
  nn::Sequential net = nn::mnist_net();
  const std::vector<Tensor> held = net.parameters();
  const Batch batch = make_batch(5);
  cross_entropy(net(batch.x), batch.y).backward();
  const Tensor weight_before = held[0].detach().clone(), grad_before = held[0].grad().clone();
  net.to(testing::test_gpu());
  for (const Tensor& p : held) {
    CHECK(p.device().is_cuda());
    CHECK((p.requires_grad() && p.is_leaf()));
    CHECK(p.grad().device().is_cuda());
  }
  CHECK_CLOSE(held[0].cpu(), weight_before, 0, 0);
  CHECK_CLOSE(held[0].grad().cpu(), grad_before, 0, 0);
  net.to(Device::cpu());
  CHECK(held[0].device().is_cpu());
  CHECK_CLOSE(held[0], weight_before, 0, 0);
}

// An empty batch (the last of a data set split over more GPUs than it has
// samples): as on the CPU and in PyTorch, an empty output, the running
// statistics as they were, zero gradients. Through conv2d (Loom's small-channel
// kernels for the first, cuDNN's shapes for the second: no engine may be asked),
// batch_norm, the pools and linear, and traced, through the blocks whose norm
// absorbs the conv's bias.
LOOM_GPU_TEST_CASE("an empty batch through a small classifier on the GPU, traced or not, fp32 and bf16") {
  Generator gen(9);
  nn::Conv2d conv1(3, 8, 3, {.padding = 1, .generator = &gen}), conv2(8, 64, 3, {.padding = 1, .generator = &gen});
  nn::BatchNorm2d bn1(8), bn2(64);
  for (nn::Module* m : std::vector<nn::Module*>{&conv1, &conv2, &bn1, &bn2}) m->to(testing::test_gpu());
  nn::Linear fc(64, 10, {.generator = &gen});
  fc.to(testing::test_gpu());
  const auto features = [&](const Tensor& x) {
    return relu(bn2(conv2(max_pool2d(relu(bn1(conv1(x))), 2))));
  };
  const auto forward = [&](const Tensor& x) {
    return fc(adaptive_avg_pool2d(avg_pool2d(features(x), 2), {1, 1}).flatten(1));
  };
  for (const bool autocast_on : {false, true}) {
    fusion::Traced traced(forward);  // one per numerics setting, as a TrainStep is
    for (const MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (const bool trace : {false, true}) {
        CAPTURE(autocast_on);
        CAPTURE(std::string(memory_format_name(format)));
        CAPTURE(trace);
        std::optional<AutocastGuard> autocast;
        if (autocast_on) autocast.emplace(DType::BFloat16);
        for (nn::Module* m : std::vector<nn::Module*>{&conv1, &conv2, &bn1, &bn2, &fc}) m->zero_grad();
        const Tensor x = zeros({0, 3, 8, 8}, {.device = testing::test_gpu()}).contiguous(format);
        const Tensor y = trace ? traced(x) : forward(x);
        CHECK(y.sizes() == Shape{0, 10});
        CHECK(y.device() == testing::test_gpu());
        sum(y).backward();
        for (const nn::BatchNorm2d* bn : {&bn1, &bn2}) {
          const int64_t c = bn->running_mean().numel();
          CHECK(bn->running_mean().cpu().to_vector<double>() == std::vector<double>(c, 0.0));
          CHECK(bn->running_var().cpu().to_vector<double>() == std::vector<double>(c, 1.0));
        }
        for (const nn::Module* m : std::vector<const nn::Module*>{&conv1, &conv2, &bn1, &bn2, &fc}) {
          for (const auto& [name, p] : m->named_parameters()) {
            CAPTURE(name);
            REQUIRE(p.grad().defined());
            CHECK(max(abs(p.grad())).item() == 0);
          }
        }
      }
    }
    CHECK(traced.plan().chains().size() == 2);
  }
}

}  // namespace
}  // namespace loom
