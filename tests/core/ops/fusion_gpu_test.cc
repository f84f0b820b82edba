// File: tests/core/ops/fusion_gpu_test.cc
// fusion::Block on the GPU: every block (the fused ops' patterns, conv / linear
// + bias + each activation row, batch norm + activation + residual, a user
// chain gelu(scale * conv(x) + shift)) fused and unfused (FusionGuard off)
// against the CPU's one-by-one evaluation, forward and every input gradient,
// NCHW and channels-last, strict fp32 / tf32 / bf16 autocast; and a fused model
// under TrainStep's CUDA-graph capture. Each check prints one line
// "BLOCK block layout policy fused fwd=... bwd=... pieces=...".
//
// Errors are normalized: max |gpu - cpu| / max(max |cpu|, 1). Under tf32 and
// bf16 a gradient may instead pass as a few decision flips (testing::decision_flips).
//
// N batch, C in channels, H, W, K out channels.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/cudnn/fused.h"
#include "core/ops/fusion.h"
#include "core/ops/fusion_report.h"
#include "core/ops/ops.h"
#include "layers/fused.h"
#include "layers/models.h"
#include "layers/nn.h"
#include "optim/adam.h"
#include "optim/train_step.h"
#include "tests/testing.h"

using namespace loom;
using fusion::Block;

namespace {

using Policy = testing::ParityPolicy;
constexpr Policy kPolicies[] = {testing::kStrictFp32Parity, testing::kTf32Parity, testing::kBf16Parity};

struct Run {
  Tensor y;
  std::vector<Tensor> grads;  // on the CPU, float32
  DType dtype = DType::Float32;  // y's dtype as the block returned it
};

bool is_buffer(const std::string& name) { return name.find("running_") != std::string::npos; }

// The block on fresh leaves on `device` (4-D ones in `format`), then backward of dy.
Run run(const Block& block, const std::vector<Tensor>& inputs, Device device, MemoryFormat format,
        const Tensor& dy, bool unfused_reference) {
  const std::vector<std::string> names = block.operand_names();
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      leaves.push_back(Tensor());
      continue;
    }
    Tensor leaf = inputs[i].detach().clone().to(device);
    if (leaf.dim() == 4) leaf = leaf.contiguous(format);
    if (i == 0 || !is_buffer(names[i - 1])) leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }
  const std::vector<Tensor> operands(leaves.begin() + 1, leaves.end());
  Run r{unfused_reference ? block.forward_unfused(leaves[0], operands) : block(leaves[0], operands), {}};
  r.dtype = r.y.dtype();
  r.y.backward(dy.to(device).to(r.y.dtype()).contiguous(r.y.suggest_memory_format()));
  for (const Tensor& leaf : leaves) {
    r.grads.push_back(leaf.defined() && leaf.requires_grad() ? leaf.grad().cpu().to(DType::Float32) : Tensor());
  }
  r.y = r.y.cpu().to(DType::Float32);
  return r;
}

struct Errors {
  double fwd = 0, bwd = 0;
  int flips = 0;  // gradients that passed only as decision flips
};

Errors compare(const Run& gpu, const Run& cpu, const Policy& policy) {
  Errors e{testing::normalized_error(gpu.y, cpu.y), 0, 0};
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    if (!cpu.grads[i].defined()) continue;
    const double error = testing::normalized_error(gpu.grads[i], cpu.grads[i]);
    if (error > policy.bwd && policy.precision != Precision::StrictFp32 &&
        testing::decision_flips(gpu.grads[i], cpu.grads[i], policy.bwd)) {
      ++e.flips;
      continue;
    }
    e.bwd = std::max(e.bwd, error);
  }
  return e;
}

// bf16 autocast rounds the input and the conv / linear weight and bias to bf16
// before the product; the reference takes the same rounded values, so the two
// sides differ only by the order of the fp32 sums and the rounding after.
std::vector<Tensor> rounded_like_autocast(const Block& block, const std::vector<Tensor>& inputs) {
  const std::vector<std::string> names = block.operand_names();
  std::vector<Tensor> rounded = inputs;
  auto round = [](const Tensor& t) { return t.to(Device::cuda()).to(DType::BFloat16).to(DType::Float32).cpu(); };
  rounded[0] = round(inputs[0]);
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].defined() && (names[i - 1] == "weight" || names[i - 1] == "bias")) rounded[i] = round(inputs[i]);
  }
  return rounded;
}

// The block fused and unfused on the GPU against the CPU, in every layout and policy.
void check_block(const Block& block, const std::vector<Tensor>& inputs, Generator& gen) {
  CAPTURE(block.str());
  const Run shape = run(block, inputs, Device::cpu(), MemoryFormat::Contiguous,
                        zeros(block.forward_unfused(inputs[0], {inputs.begin() + 1, inputs.end()}).sizes()),
                        true);
  const Tensor dy = randn(shape.y.sizes(), {}, &gen);
  const Run cpu_fp32 = run(block, inputs, Device::cpu(), MemoryFormat::Contiguous, dy, true);
  const Run cpu_bf16 = run(block, rounded_like_autocast(block, inputs), Device::cpu(), MemoryFormat::Contiguous, dy, true);
  for (const Policy& policy : kPolicies) {
    const Run& cpu = policy.bf16 ? cpu_bf16 : cpu_fp32;
    for (MemoryFormat format : testing::kParityLayouts) {
      NumericsGuard numerics({.precision = policy.precision});
      std::optional<AutocastGuard> autocast;
      if (policy.bf16) autocast.emplace(DType::BFloat16);
      const char* layout = format == MemoryFormat::ChannelsLast ? "nhwc" : "nchw";
      CAPTURE(policy.name);
      CAPTURE(layout);
      std::optional<DType> fused_dtype;
      for (bool fused : {true, false}) {
        FusionGuard guard(fused);
        const int64_t before = cudnn::fused_runs().epilogue;
        const Run gpu = run(block, inputs, Device::cuda(), format, dy, false);
        const Errors e = compare(gpu, cpu, policy);
        const int64_t ran = cudnn::fused_runs().epilogue - before;
        std::printf("BLOCK %s %s %s %s fwd=%.2e bwd=%.2e decision_flips=%d epilogue_graphs=%lld pieces=%s\n",
                    block.str().c_str(), layout, policy.name, fused ? "fused" : "unfused", e.fwd, e.bwd, e.flips,
                    static_cast<long long>(ran), block.pieces_str().c_str());
        if (!fused) CHECK(ran == 0);
        // Fusion must not change what the block returns: the same dtype either way.
        if (fused_dtype) CHECK(gpu.dtype == *fused_dtype);
        fused_dtype = gpu.dtype;
        CHECK(e.fwd <= policy.fwd);
        CHECK(e.bwd <= policy.bwd);
      }
    }
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("conv2d + bias + each activation row, fused vs unfused vs the CPU") {
  Generator gen(21);
  Tensor x = randn({4, 16, 9, 7}, {}, &gen), w = randn({24, 16, 3, 3}, {}, &gen) * 0.1;
  Tensor b = randn({24}, {}, &gen);
  for (ActivationKind kind : cpu::kActivationKinds) {
    check_block(Block().conv2d({.padding = {1, 1}}).bias().activation(kind), {x, w, b}, gen);
  }
  check_block(Block().conv2d({.padding = {1, 1}}).bias().relu(), {x, w, b}, gen);  // conv2d_bias_relu
}

LOOM_GPU_TEST_CASE("linear + bias + each activation row, fused vs unfused vs the CPU") {
  Generator gen(22);
  Tensor x = randn({32, 40}, {}, &gen), w = randn({24, 40}, {}, &gen) * 0.1, b = randn({24}, {}, &gen);
  for (ActivationKind kind : cpu::kActivationKinds) {
    check_block(Block().linear().bias().activation(kind), {x, w, b}, gen);
  }
  check_block(Block().linear().bias().relu(), {x, w, b}, gen);  // linear_relu
}

LOOM_GPU_TEST_CASE("batch norm + activation + residual, and a user chain gelu(scale * x + shift)") {
  Generator gen(23);
  Tensor x = randn({4, 16, 8, 8}, {}, &gen), w = randn({32, 16, 3, 3}, {}, &gen) * 0.1;
  Tensor gamma = rand({32}, {}, &gen) + 0.5, beta = randn({32}, {}, &gen), residual = randn({4, 32, 8, 8}, {}, &gen);
  check_block(Block().conv2d({.padding = {1, 1}}).batch_norm().add_residual().relu(),
              {x, w, gamma, beta, Tensor(), Tensor(), residual}, gen);
  check_block(Block().conv2d({.padding = {1, 1}}).batch_norm().gelu().add_residual(),
              {x, w, gamma, beta, Tensor(), Tensor(), residual}, gen);
  check_block(Block().conv2d({.padding = {1, 1}}).scale_bias().gelu(), {x, w, gamma, beta}, gen);
  check_block(Block().conv2d({.padding = {1, 1}}).mul(0.5).add(0.25).silu().add_residual(), {x, w, residual}, gen);
}

LOOM_GPU_TEST_CASE("a fused model trains under TrainStep's CUDA-graph capture as it does eagerly") {
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  auto make = [](nn::Sequential& net) {
    manual_seed(5);
    net = nn::Sequential(nn::Conv2d(1, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::GELU(), nn::Conv2d(8, 8, 3, {.padding = 1}),
                         nn::SiLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(8 * 14 * 14, 10), nn::Tanh());
    nn::fuse(net);
    net.to(Device::cuda());
    net.to(MemoryFormat::ChannelsLast);
  };
  nn::Sequential eager_net, graph_net;
  make(eager_net);
  make(graph_net);
  optim::Adam eager_opt(eager_net.parameters(), {.lr = 1e-3}), graph_opt(graph_net.parameters(), {.lr = 1e-3});
  auto loss_of = [](nn::Sequential& net) {
    return [&net](const Tensor& x, const Tensor& y) {
      Tensor logits = net(x);
      return std::vector<Tensor>{cross_entropy(logits, y), logits};
    };
  };
  optim::TrainStep eager(loss_of(eager_net), eager_opt, {.cuda_graph = false});
  optim::TrainStep graph(loss_of(graph_net), graph_opt, {.cuda_graph = true});
  Generator gen(6);
  Tensor x = randn({16, 1, 28, 28}, {}, &gen).to(Device::cuda()).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = randint(0, 10, {16}, {.dtype = DType::Int64}, &gen).to(Device::cuda());
  for (int i = 0; i < 10; ++i) {
    CAPTURE(i);
    const double e = eager(x, y)[0].item(), g = graph(x, y)[0].item();
    CHECK(std::fabs(e - g) <= 1e-4 * std::max(1.0, std::fabs(e)));
  }
  CHECK(graph.stats().replays > 0);
  std::printf("%s", fusion::report().c_str());
}

#endif  // LOOM_WITH_CUDA
