// File: tests/core/ops/fusion_gpu_test.cc
// fusion::Block on the GPU: the dgrad/wgrad-fused derivative probed once per
// structure, a conv's bias absorbed by the training batch norm after it, and a
// fused model under TrainStep's CUDA-graph capture. The
// blocks' parity matrix (fused vs unfused vs the CPU, tests/core/ops/
// fusion_parity.h) is in fusion_{rows1,rows2,chains}_{strict,tf32,bf16}_gpu_test
// and fusion_linear_gpu_test, so that each binary stays short and they can run
// side by side.
//
// N batch, C in channels, H, W, K out channels.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/cudnn/fused.h"
#include "core/numerics.h"
#include "core/ops/fusion.h"
#include "core/ops/fusion_report.h"
#include "core/ops/ops.h"
#include "layers/fused.h"
#include "layers/models.h"
#include "layers/nn.h"
#include "optim/adam.h"
#include "optim/train_step.h"
#include "tests/core/ops/fusion_parity.h"
#include "tests/testing.h"

using namespace loom;
using fusion::Block;

using fusion_parity::head_backward_note;
using fusion_parity::kBackwardTiers;
using fusion_parity::tier_of;

LOOM_GPU_TEST_CASE("a derivative graph without a dgrad/wgrad-fused engine is probed once per structure") {
  NumericsGuard numerics({.precision = Precision::Tf32});
  PlanBuildGuard eager(PlanBuildMode::Eager);  // each answer final at once
  // A chain no other case here runs (mul by a scalar, then elu), so its
  // structure is new to this process.
  const Block block = Block().conv2d().bias().mul(3.0).activation(ActivationKind::Elu);
  Generator gen(24);
  struct Backward {
    std::string note;
    int64_t skipped = 0;
  };
  auto backward = [&](int64_t batch) {
    auto leaf = [](Tensor t, MemoryFormat format) {
      return t.to(testing::test_gpu()).contiguous(format).requires_grad_(true);
    };
    Tensor x = leaf(randn({batch, 8, 6, 6}, {}, &gen), MemoryFormat::ChannelsLast);
    Tensor w = leaf(randn({12, 8, 3, 3}, {}, &gen) * 0.1, MemoryFormat::ChannelsLast);
    Tensor b = leaf(randn({12}, {}, &gen), MemoryFormat::Contiguous);
    const cudnn::FusedRuns before = cudnn::fused_runs();
    fusion::clear_report();
    block(x, {w, b}).sum().backward();
    return Backward{head_backward_note(block), cudnn::fused_runs().epilogue_grads_skipped - before.epilogue_grads_skipped};
  };
  const Backward first = backward(2), second = backward(3);
  std::printf("PROBE first=%s\nPROBE second=%s\n", first.note.c_str(), second.note.c_str());
  CHECK(tier_of(first.note) < std::size(kBackwardTiers));
  CHECK(tier_of(second.note) == tier_of(first.note));
  CHECK(first.skipped == 0);
  // Tier 0 ran: it had an engine, so the other size builds its own plan. Else
  // the first size found none, and the second does not ask again.
  CHECK(second.skipped == (tier_of(first.note) == 0 ? 0 : 1));
}

LOOM_GPU_TEST_CASE("a conv's bias before a training batch norm is absorbed: outputs, grads and statistics as one by one") {
  Generator gen(31);
  const Tensor x = randn({8, 5, 9, 9}, {}, &gen), w = randn({12, 5, 3, 3}, {}, &gen) * 0.2;
  const Tensor b = randn({12}, {}, &gen) * 3.0, gamma = rand({12}, {}, &gen) + 0.5;
  const Tensor beta = randn({12}, {}, &gen), mean0 = randn({12}, {}, &gen), var0 = rand({12}, {}, &gen) + 0.5;
  const Tensor dy = randn({8, 12, 9, 9}, {}, &gen);
  for (bool residual : {false, true}) {
    Block block = Block().conv2d({.padding = {1, 1}}).bias().batch_norm({.momentum = 0.3});
    if (residual) block.add_residual();
    block.relu();
    const Tensor r = residual ? randn({8, 12, 9, 9}, {}, &gen) : Tensor();
    CAPTURE(block.str());
    struct Out {
      Tensor y, mean, var;
      std::vector<Tensor> grads;  // x, weight, conv bias, gamma, beta, residual
    };
    auto run = [&](Device device, bool fused) {
      FusionGuard guard(fused);
      std::vector<Tensor> leaves;
      for (const Tensor& t : {x, w, b, gamma, beta, r}) {
        leaves.push_back(t.defined() ? t.to(device).detach().requires_grad_(true) : Tensor());
      }
      Out o{Tensor(), mean0.clone().to(device), var0.clone().to(device), {}};  // updated in place
      std::vector<Tensor> operands{leaves[1], leaves[2], leaves[3], leaves[4], o.mean, o.var};
      if (residual) operands.push_back(leaves[5]);
      o.y = block(leaves[0], operands);
      o.y.backward(dy.to(device));
      for (const Tensor& leaf : leaves) o.grads.push_back(leaf.defined() ? leaf.grad().cpu() : Tensor());
      o.y = o.y.cpu();
      o.mean = o.mean.cpu();
      o.var = o.var.cpu();
      return o;
    };
    NumericsGuard numerics({.precision = Precision::StrictFp32});
    const Out cpu = run(Device::cpu(), false), gpu = run(testing::test_gpu(), true);
    std::optional<fusion::BlockReport> report;
    for (const fusion::BlockReport& e : fusion::block_reports()) {
      if (e.block == block.str()) report = e;
    }
    REQUIRE(report.has_value());
    REQUIRE(report->pieces.size() >= 2);
    CHECK(report->pieces[0].how == "conv2d without its bias, which the batch norm after it absorbs");
    CHECK(report->pieces[1].how == "fused op batch_norm_activation (relu), absorbing the conv's bias");
    CHECK(testing::normalized_error(gpu.y, cpu.y) < 1e-4);
    // The CPU run adds the bias (3x a unit normal) before the norm: the running mean counts it.
    CHECK(testing::normalized_error(gpu.mean, cpu.mean) < 1e-4);
    CHECK(testing::normalized_error(gpu.var, cpu.var) < 1e-4);
    for (size_t i = 0; i < gpu.grads.size(); ++i) {
      if (!cpu.grads[i].defined()) continue;
      CAPTURE(i);
      CHECK(testing::normalized_error(gpu.grads[i], cpu.grads[i]) < 1e-3);
    }
    for (double v : testing::values(gpu.grads[2])) CHECK(v == 0.0);  // the absorbed bias's gradient
  }
}

LOOM_GPU_TEST_CASE("a fused model trains under TrainStep's CUDA-graph capture as it does eagerly") {
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  auto make = [](nn::Sequential& net) {
    manual_seed(5);
    net = nn::Sequential(nn::Conv2d(1, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::GELU(), nn::Conv2d(8, 8, 3, {.padding = 1}),
                         nn::SiLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(8 * 14 * 14, 10), nn::Tanh());
    nn::fuse(net);
    net.to(testing::test_gpu());
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
  Tensor x = randn({16, 1, 28, 28}, {}, &gen).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = randint(0, 10, {16}, {.dtype = DType::Int64}, &gen).to(testing::test_gpu());
  for (int i = 0; i < 10; ++i) {
    CAPTURE(i);
    const double e = eager(x, y)[0].item(), g = graph(x, y)[0].item();
    CHECK(std::fabs(e - g) <= 1e-4 * std::max(1.0, std::fabs(e)));
  }
  CHECK(graph.stats().replays > 0);
  std::printf("%s", fusion::report().c_str());
}

#endif  // LOOM_WITH_CUDA
