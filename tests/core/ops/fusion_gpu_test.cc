// File: tests/core/ops/fusion_gpu_test.cc
// fusion::Block on the GPU: every block (the fused ops' patterns, conv / linear
// + bias + each activation row, batch norm + activation + residual, a user
// chain gelu(scale * conv(x) + shift), chains with a mul by a scalar, a
// scale-bias and a residual) fused and unfused (FusionGuard off) against the
// CPU's one-by-one evaluation, forward and every input gradient, NCHW and
// channels-last, strict fp32 / tf32 / bf16 autocast; and a fused model under
// TrainStep's CUDA-graph capture. Each check prints one line
// "BLOCK block layout policy fused fwd=... bwd=... pieces=... backward=...".
// A head's backward (its steps' derivative chain) must name its tier in the
// report, and the tier must agree with the fused-graph counters.
//
// Plans are built lazily and settled: a test case first runs each of its
// blocks in every policy and layout once, which queues each runtime-compiled
// graph (0.2-1.3 s each on the H100) on the background builders (several
// threads), then waits for them and swaps them in; the checked runs then meet
// only built plans (checked: no key starts lazily during them), the plans an
// eager build would pick. Built one by one, eagerly, this test took over 7 min.
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
#include "core/numerics.h"
#include "core/cudnn/fused.h"
#include "core/cudnn/plan_cache.h"
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

// Whether the block's first piece is a head whose backward is derived from its
// steps (core/ops/fusion.cc): a conv or linear with pointwise steps after it,
// other than the plain layer [head, bias] and the fused ops [head, (bias), relu].
bool has_derived_backward(const Block& block) {
  const std::vector<fusion::Step>& steps = block.steps();
  if (steps.empty() || (steps[0].kind != fusion::StepKind::Conv2d && steps[0].kind != fusion::StepKind::Linear)) {
    return false;
  }
  size_t n = 1;
  while (n < steps.size() && steps[n].kind != fusion::StepKind::BatchNorm) ++n;
  auto is = [&](size_t i, fusion::StepKind kind) { return steps[i].kind == kind; };
  auto plain_relu = [&](size_t i) {
    return is(i, fusion::StepKind::Activation) && steps[i].activation == ActivationKind::Relu && !steps[i].parameter;
  };
  if (n == 1 || (n == 2 && is(1, fusion::StepKind::Bias))) return false;
  const bool fused_op = (n == 2 && plain_relu(1)) || (n == 3 && is(1, fusion::StepKind::Bias) && plain_relu(2));
  return !fused_op;
}

constexpr const char* kBackwardTiers[] = {"derivative fused into dgrad/wgrad (engine",
                                          "derivative as one graph (engine", "derivative unfused: "};

// How the head's backward ran in the block's latest run (the report's note), or "".
std::string head_backward_note(const Block& block) {
  for (const fusion::BlockReport& r : fusion::block_reports()) {
    if (r.block == block.str() && !r.pieces.empty()) return r.pieces[0].backward;
  }
  return "";
}

// The note names one of the three tiers, and the fused-graph counters agree with it.
void check_backward_tier(const std::string& note, const cudnn::FusedRuns& before) {
  const cudnn::FusedRuns after = cudnn::fused_runs();
  const bool into = note.starts_with(kBackwardTiers[0]), chain = note.starts_with(kBackwardTiers[1]);
  CHECK((into || chain || note.starts_with(kBackwardTiers[2])));
  CHECK((after.epilogue_grads > before.epilogue_grads) == into);
  CHECK((after.epilogue_backward > before.epilogue_backward) == chain);
}

struct Case {
  Block block;
  std::vector<Tensor> inputs;
};

// The block's output shape, from one CPU run.
Shape output_sizes(const Case& c) {
  return c.block.forward_unfused(c.inputs[0], {c.inputs.begin() + 1, c.inputs.end()}).sizes();
}

// Runs every case once on the GPU in every policy and layout, fused and
// unfused, so that each plan the checked runs need is queued; then waits for
// the background builds and swaps them in.
void run_once_and_settle(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const Tensor dy = zeros(output_sizes(c));
    for (const Policy& policy : kPolicies) {
      NumericsGuard numerics({.precision = policy.precision});
      std::optional<AutocastGuard> autocast;
      if (policy.bf16) autocast.emplace(DType::BFloat16);
      for (MemoryFormat format : testing::kParityLayouts) {
        for (bool fused : {true, false}) {
          FusionGuard guard(fused);
          (void)run(c.block, c.inputs, Device::cuda(), format, dy, false);
        }
      }
    }
  }
  cudnn::PlanCache::global().wait_for_background_builds();
  (void)cudnn::PlanCache::global().apply_pending();
}

// Until a round meets no key it has not built: a swapped-in plan can change
// which graphs a block's later pieces meet (a fused forward, then its backward).
void build_plans(const std::vector<Case>& cases) {
  constexpr int kMaxRounds = 3;
  for (int round = 0; round < kMaxRounds; ++round) {
    const int64_t before = cudnn::PlanCache::global().stats().lazy_plans;
    run_once_and_settle(cases);
    if (cudnn::PlanCache::global().stats().lazy_plans == before) return;
  }
}

// The block fused and unfused on the GPU against the CPU, in every layout and policy.
void check_block(const Case& c, Generator& gen) {
  const Block& block = c.block;
  const std::vector<Tensor>& inputs = c.inputs;
  CAPTURE(block.str());
  const Tensor dy = randn(output_sizes(c), {}, &gen);
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
        const cudnn::FusedRuns before = cudnn::fused_runs();
        fusion::clear_report();
        const Run gpu = run(block, inputs, Device::cuda(), format, dy, false);
        const Errors e = compare(gpu, cpu, policy);
        const int64_t ran = cudnn::fused_runs().epilogue - before.epilogue;
        const std::string backward = head_backward_note(block);
        std::printf("BLOCK %s %s %s %s fwd=%.2e bwd=%.2e decision_flips=%d epilogue_graphs=%lld pieces=%s backward=%s\n",
                    block.str().c_str(), layout, policy.name, fused ? "fused" : "unfused", e.fwd, e.bwd, e.flips,
                    static_cast<long long>(ran), block.pieces_str().c_str(), backward.c_str());
        if (!fused) CHECK(ran == 0);
        if (fused && has_derived_backward(block)) check_backward_tier(backward, before);
        if (!fused || !has_derived_backward(block)) CHECK(backward.empty());
        // Fusion must not change what the block returns: the same dtype either way.
        if (fused_dtype) CHECK(gpu.dtype == *fused_dtype);
        fused_dtype = gpu.dtype;
        CHECK(e.fwd <= policy.fwd);
        CHECK(e.bwd <= policy.bwd);
      }
    }
  }
}

// Every case's plans built (lazily, in parallel), then every case checked on them.
void check_blocks(const std::vector<Case>& cases, Generator& gen) {
  PlanBuildGuard lazy(PlanBuildMode::Lazy);
  build_plans(cases);
  const int64_t lazy_before = cudnn::PlanCache::global().stats().lazy_plans;
  for (const Case& c : cases) check_block(c, gen);
  // Every checked run found its plans built: none started on a stand-in or the tier below.
  CHECK(cudnn::PlanCache::global().stats().lazy_plans == lazy_before);
}

}  // namespace

LOOM_GPU_TEST_CASE("conv2d + bias + each activation row, fused vs unfused vs the CPU") {
  Generator gen(21);
  Tensor x = randn({4, 16, 9, 7}, {}, &gen), w = randn({24, 16, 3, 3}, {}, &gen) * 0.1;
  Tensor b = randn({24}, {}, &gen);
  std::vector<Case> cases;
  for (ActivationKind kind : cpu::kActivationKinds) {  // relu: the fused op conv2d_bias_relu
    cases.push_back({Block().conv2d({.padding = {1, 1}}).bias().activation(kind), {x, w, b}});
  }
  check_blocks(cases, gen);
}

LOOM_GPU_TEST_CASE("linear + bias + each activation row, fused vs unfused vs the CPU") {
  Generator gen(22);
  Tensor x = randn({32, 40}, {}, &gen), w = randn({24, 40}, {}, &gen) * 0.1, b = randn({24}, {}, &gen);
  std::vector<Case> cases;
  for (ActivationKind kind : cpu::kActivationKinds) {  // relu: the fused op linear_relu
    cases.push_back({Block().linear().bias().activation(kind), {x, w, b}});
  }
  // A derivative chain with a per-channel scale and shift, a mul by a scalar and a residual.
  Tensor scale = rand({24}, {}, &gen) + 0.5, shift = randn({24}, {}, &gen), residual = randn({32, 24}, {}, &gen);
  cases.push_back({Block().linear().scale_bias().mul(2.0).silu().add_residual(), {x, w, scale, shift, residual}});
  check_blocks(cases, gen);
}

LOOM_GPU_TEST_CASE("batch norm + activation + residual, and a user chain gelu(scale * x + shift)") {
  Generator gen(23);
  Tensor x = randn({4, 16, 8, 8}, {}, &gen), w = randn({32, 16, 3, 3}, {}, &gen) * 0.1;
  Tensor gamma = rand({32}, {}, &gen) + 0.5, beta = randn({32}, {}, &gen), residual = randn({4, 32, 8, 8}, {}, &gen);
  const Block conv = Block().conv2d({.padding = {1, 1}});
  check_blocks({{Block(conv).batch_norm().add_residual().relu(), {x, w, gamma, beta, Tensor(), Tensor(), residual}},
                {Block(conv).batch_norm().gelu().add_residual(), {x, w, gamma, beta, Tensor(), Tensor(), residual}},
                {Block(conv).scale_bias().gelu(), {x, w, gamma, beta}},
                {Block(conv).mul(0.5).add(0.25).silu().add_residual(), {x, w, residual}},
                {Block(conv).mul(0.5).scale_bias().gelu().sub(0.125), {x, w, gamma, beta}},
                {Block(conv).bias().activation(ActivationKind::LeakyRelu, 0.2).mul(1.5), {x, w, beta}}},
               gen);
}

// Which of kBackwardTiers a note names (3: none).
size_t tier_of(const std::string& note) {
  size_t tier = 0;
  while (tier < std::size(kBackwardTiers) && !note.starts_with(kBackwardTiers[tier])) ++tier;
  return tier;
}

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
      return t.to(Device::cuda()).contiguous(format).requires_grad_(true);
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
