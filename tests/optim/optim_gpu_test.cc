// File: tests/optim/optim_gpu_test.cc
// The optimizers (SGD, Adam, AdamW, RMSprop, Adagrad) on the GPU (fused multi-tensor kernels) against the CPU
// reference loops, over many parameters of odd sizes (1, 7, 4097, 1000003,
// empty, channels-last) for 10 steps; the launch count of a step; gradient
// clipping on the GPU.
//
// Tolerances: both sides round each operation once in the tensors' dtype with
// no FMA contraction (core/cuda/optim.cu), so they should agree bit for bit;
// the checks allow float32 rtol 1e-6 and float64 rtol 1e-12 as the contract.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <functional>
#include <memory>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/allocator_purpose.h"
#include "core/cuda/capture.h"
#include "core/cuda/optim.h"
#include "core/generator.h"
#include "optim/optim.h"
#include "tests/testing.h"

using namespace loom;

namespace {

struct Tolerance {
  double rtol, atol;
};

Tolerance tolerance_for(DType dtype) {
  return dtype == DType::Float32 ? Tolerance{1e-6, 1e-7} : Tolerance{1e-12, 1e-14};
}

// Sizes chosen to straddle the kernels' 4096-element chunks.
const std::vector<Shape> kShapes = {{1},    {7},       {33, 3},  {4096}, {4097},     {0, 5},
                                    {1000}, {65537},   {2, 1},   {3, 5, 7, 11}, {1000003},
                                    {8193}, {13, 17}, {5}};

// The same parameters on both devices; the last one channels-last.
struct Params {
  std::vector<Tensor> cpu, gpu;
};

Params make_params(DType dtype, Generator& gen) {
  Params p;
  for (const Shape& sizes : kShapes) {
    Tensor base = randn(sizes, {.dtype = dtype}, &gen);
    p.cpu.push_back(base.clone().requires_grad_());
    p.gpu.push_back(base.to(testing::test_gpu()).requires_grad_());
  }
  Tensor nhwc = randn({2, 3, 5, 5}, {.dtype = dtype}, &gen).contiguous(MemoryFormat::ChannelsLast);
  p.cpu.push_back(nhwc.clone().requires_grad_());
  p.gpu.push_back(nhwc.to(testing::test_gpu()).requires_grad_());
  return p;
}

// Fresh random gradients on both devices; parameter `skip` gets none this step.
void set_grads(Params& p, Generator& gen, size_t skip) {
  for (size_t k = 0; k < p.cpu.size(); ++k) {
    if (k == skip) {
      p.cpu[k].set_grad(Tensor());
      p.gpu[k].set_grad(Tensor());
      continue;
    }
    Tensor g = randn(p.cpu[k].sizes(), {.dtype = p.cpu[k].dtype()}, &gen);
    p.cpu[k].set_grad(g);
    p.gpu[k].set_grad(g.to(testing::test_gpu()));  // contiguous, also for the channels-last param
  }
}

using Factory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

struct Config {
  const char* name;
  Factory make;
};

const std::vector<Config>& configs() {
  static const std::vector<Config> all = {
      {"sgd", [](const auto& p) { return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1}); }},
      {"sgd_momentum_dampening_decay",
       [](const auto& p) {
         return std::make_unique<optim::SGD>(
             p, optim::SgdOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.2, .weight_decay = 1e-2});
       }},
      {"sgd_nesterov_maximize",
       [](const auto& p) {
         return std::make_unique<optim::SGD>(
             p, optim::SgdOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true, .maximize = true});
       }},
      {"adam", [](const auto& p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-2}); }},
      {"adam_amsgrad_decay",
       [](const auto& p) {
         return std::make_unique<optim::Adam>(
             p, optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
       }},
      {"adamw_amsgrad",
       [](const auto& p) {
         return std::make_unique<optim::AdamW>(
             p, optim::AdamWOptions{.lr = 1e-2, .betas = {0.8, 0.99}, .amsgrad = true});
       }},
      {"rmsprop", [](const auto& p) { return std::make_unique<optim::RMSprop>(p); }},
      {"rmsprop_momentum_decay",
       [](const auto& p) {
         return std::make_unique<optim::RMSprop>(
             p, optim::RmspropOptions{.lr = 1e-3, .alpha = 0.9, .weight_decay = 1e-2, .momentum = 0.9});
       }},
      {"rmsprop_centered_momentum_maximize",
       [](const auto& p) {
         return std::make_unique<optim::RMSprop>(
             p, optim::RmspropOptions{.lr = 1e-3, .momentum = 0.5, .centered = true, .maximize = true});
       }},
      {"adagrad", [](const auto& p) { return std::make_unique<optim::Adagrad>(p); }},
      {"adagrad_decay_initial_maximize",
       [](const auto& p) {
         return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions{.lr = 0.05,
                                                                          .lr_decay = 0.1,
                                                                          .weight_decay = 1e-2,
                                                                          .initial_accumulator_value = 0.1,
                                                                          .maximize = true});
       }},
  };
  return all;
}

void check_same(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu) {
  for (size_t k = 0; k < cpu.size(); ++k) {
    CAPTURE(k);
    const Tolerance tol = tolerance_for(cpu[k].dtype());
    CHECK(gpu[k].device().is_cuda());
    CHECK_CLOSE(gpu[k].cpu(), cpu[k], tol.rtol, tol.atol);
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("fused GPU steps match the CPU reference over 10 steps of many odd-sized params") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Config& config : configs()) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(config.name);
      Generator gen(11);
      Params p = make_params(dtype, gen);
      auto on_cpu = config.make(p.cpu);
      auto on_gpu = config.make(p.gpu);
      for (int t = 0; t < 10; ++t) {
        // Step 3 skips parameter 4, so its step count lags: Adam and Adagrad then
        // run two step counts and SGD a first-step run beside the others.
        set_grads(p, gen, t == 3 ? 4 : p.cpu.size());
        on_cpu->step();
        on_gpu->step();
      }
      check_same(p.gpu, p.cpu);
      for (size_t k = 0; k < p.cpu.size(); ++k) {
        CAPTURE(k);
        const optim::ParamState* gpu_state = on_gpu->state(k);
        const optim::ParamState* cpu_state = on_cpu->state(k);
        REQUIRE(gpu_state != nullptr);
        CHECK(gpu_state->step == cpu_state->step);
        REQUIRE(gpu_state->buffers.size() == cpu_state->buffers.size());
        for (size_t b = 0; b < cpu_state->buffers.size(); ++b) {
          const Tolerance tol = tolerance_for(dtype);
          CHECK_CLOSE(gpu_state->buffers[b].second.cpu(), cpu_state->buffers[b].second, tol.rtol,
                      tol.atol);
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("a GPU step is one launch per group and dtype, whatever the parameter count") {
  // By construction (optim/update.cc): each run of a group's parameters that
  // share device, dtype and step count (Adam) or first step (SGD) is one
  // cuda::launch_staged call, and each call is one launch over a cached slot table.
  Generator gen(12);
  Params p = make_params(DType::Float32, gen);  // 15 tensors
  Tensor other = randn({9}, {.dtype = DType::Float64}, &gen).to(testing::test_gpu()).requires_grad_();
  optim::Adam adam({{.params = p.gpu}, {.params = {other}, .lr = 0.1}});
  set_grads(p, gen, p.cpu.size());
  other.set_grad(zeros_like(other).fill_(0.5));
  for (int t = 0; t < 3; ++t) {
    const int64_t before = cuda::multi_tensor_launches();
    adam.step();
    CHECK(cuda::multi_tensor_launches() - before == 2);
  }
  optim::SGD sgd({p.gpu[0], other}, {.lr = 0.1, .momentum = 0.9});  // two dtypes, one group
  int64_t before = cuda::multi_tensor_launches();
  sgd.step();
  CHECK(cuda::multi_tensor_launches() - before == 2);
  optim::RMSprop rmsprop(p.gpu, {.momentum = 0.9, .centered = true});
  before = cuda::multi_tensor_launches();
  rmsprop.step();
  CHECK(cuda::multi_tensor_launches() - before == 1);
}

LOOM_GPU_TEST_CASE("save on the GPU, resume on the GPU: bit-identical to one run") {
  for (const Config& config : configs()) {
    CAPTURE(config.name);
    Generator straight_gen(21), resumed_gen(21);
    Params straight = make_params(DType::Float32, straight_gen);
    Params resumed = make_params(DType::Float32, resumed_gen);
    auto straight_opt = config.make(straight.gpu);
    for (int t = 0; t < 6; ++t) {
      set_grads(straight, straight_gen, straight.cpu.size());
      straight_opt->step();
    }
    StateDict saved;
    {
      auto first = config.make(resumed.gpu);
      for (int t = 0; t < 3; ++t) {
        set_grads(resumed, resumed_gen, resumed.cpu.size());
        first->step();
      }
      for (const auto& [name, value] : first->state_dict()) saved.emplace_back(name, value.cpu());
    }
    auto second = config.make(resumed.gpu);
    second->load_state_dict(saved);  // CPU tensors: copied to each parameter's GPU
    for (int t = 3; t < 6; ++t) {
      set_grads(resumed, resumed_gen, resumed.cpu.size());
      second->step();
    }
    for (size_t k = 0; k < straight.gpu.size(); ++k) {
      CAPTURE(k);
      CHECK(resumed.gpu[k].to_vector<float>() == straight.gpu[k].to_vector<float>());
    }
  }
}

LOOM_GPU_TEST_CASE("clip_grad_norm_ on the GPU matches the CPU") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    CAPTURE(dtype_name(dtype));
    Generator gen(31);
    Params p = make_params(dtype, gen);
    set_grads(p, gen, 2);  // parameter 2 has no gradient
    // A strided (transposed) gradient goes the unfused way.
    Tensor g = randn({11, 5}, {.dtype = dtype}, &gen);
    Tensor q_cpu = zeros({5, 11}, {.dtype = dtype, .requires_grad = true});
    Tensor q_gpu = zeros({5, 11}, {.dtype = dtype, .device = testing::test_gpu(), .requires_grad = true});
    q_cpu.set_grad(g.t());
    q_gpu.set_grad(g.to(testing::test_gpu()).t());
    p.cpu.push_back(q_cpu);
    p.gpu.push_back(q_gpu);
    const double cpu_norm = optim::clip_grad_norm_(p.cpu, 1.0);
    const double gpu_norm = optim::clip_grad_norm_(p.gpu, 1.0);
    CHECK(gpu_norm == doctest::Approx(cpu_norm).epsilon(1e-12));
    CHECK(cpu_norm > 100.0);  // so the gradients were scaled
    const Tolerance tol = tolerance_for(dtype);
    for (size_t k = 0; k < p.cpu.size(); ++k) {
      CAPTURE(k);
      if (!p.cpu[k].grad().defined()) continue;
      CHECK_CLOSE(p.gpu[k].grad().cpu(), p.cpu[k].grad(), tol.rtol, tol.atol);
    }
  }
}

LOOM_GPU_TEST_CASE("an optimizer's large buffers share state-pool segments, made at the first step or loaded") {
  const int device = testing::test_gpu().index;
  const auto state_reserved = [device] { return cuda::pool_usage(device).at(1).usage.reserved_bytes; };
  constexpr size_t kMiB = size_t{1} << 20;
  Generator gen(5);
  Params p;  // four 2.25 MiB float32 weights (resnet34's 3x3x256x256) and a small bias
  for (const Shape& sizes : std::vector<Shape>{{256, 256, 3, 3}, {256, 256, 3, 3}, {256, 256, 3, 3}, {256, 256, 3, 3},
                                               {256}}) {
    p.gpu.push_back(randn(sizes, {}, &gen).to(testing::test_gpu()).requires_grad_());
    p.cpu.push_back(p.gpu.back().cpu());
  }
  // Adam with amsgrad: 12 large buffers, 27 MiB, one 28 MiB segment, and one
  // small segment for the bias's three; a segment each would take 4 MiB per buffer.
  const Config& amsgrad = configs()[4];
  const size_t one_optimizer = 28 * kMiB + cuda::kSegmentGranularity;
  cuda::synchronize();
  cuda::empty_cache();
  const size_t before = state_reserved();
  StateDict saved;
  {
    auto first = amsgrad.make(p.gpu);
    set_grads(p, gen, p.cpu.size());
    first->step();
    CHECK(state_reserved() - before == one_optimizer);
    saved = first->state_dict();
  }
  cuda::synchronize();
  cuda::empty_cache();
  // The saved dict still holds the first's buffers; the loaded ones take one
  // more large segment, and their small ones fit in the first's small segment.
  const size_t with_loaded = one_optimizer + 28 * kMiB;
  auto second = amsgrad.make(p.gpu);
  second->load_state_dict(saved);
  CHECK(state_reserved() - before == with_loaded);
  set_grads(p, gen, p.cpu.size());
  second->step();
  CHECK(state_reserved() - before == with_loaded);  // the step made no buffer
}

#endif  // LOOM_WITH_CUDA
