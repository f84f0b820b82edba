// File: tests/core/ops/fusion_parity.cc
// The fusion GPU tests' parity check: fused and unfused blocks against the CPU.
#include "tests/core/ops/fusion_parity.h"

#ifdef LOOM_WITH_CUDA
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/autocast.h"
#include "core/cudnn/fused.h"
#include "core/cudnn/plan_cache.h"
#include "core/numerics.h"
#include "core/ops/fusion_report.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom::fusion_parity {

using fusion::Block;

namespace {

using Policy = testing::ParityPolicy;
using Policies = std::vector<Policy>;

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
  auto round = [](const Tensor& t) { return t.to(testing::test_gpu()).to(DType::BFloat16).to(DType::Float32).cpu(); };
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
    return is(i, fusion::StepKind::Activation) && steps[i].activation == ActivationKind::Relu;
  };
  if (n == 1 || (n == 2 && is(1, fusion::StepKind::Bias))) return false;
  const bool fused_op = (n == 2 && plain_relu(1)) || (n == 3 && is(1, fusion::StepKind::Bias) && plain_relu(2));
  return !fused_op;
}

// The note names one of the three tiers, and the fused-graph counters agree with it.
void check_backward_tier(const std::string& note, const cudnn::FusedRuns& before) {
  const cudnn::FusedRuns after = cudnn::fused_runs();
  const bool into = note.starts_with(kBackwardTiers[0]), chain = note.starts_with(kBackwardTiers[1]);
  CHECK((into || chain || note.starts_with(kBackwardTiers[2])));
  CHECK((after.epilogue_grads > before.epilogue_grads) == into);
  CHECK((after.epilogue_backward > before.epilogue_backward) == chain);
}

// Seconds since the first call, for the progress lines.
double seconds_since_start() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The block's output shape, from one CPU run.
Shape output_sizes(const Case& c) {
  return c.block.forward_unfused(c.inputs[0], {c.inputs.begin() + 1, c.inputs.end()}).sizes();
}

// Keys that started on a stand-in or the tier below: built lazily, or waiting
// for a builder to restore their plan file (plan files may be on).
int64_t started_late(const cudnn::PlanCacheStats& s) { return s.lazy_plans + s.restores_queued; }

// The graphs still waiting for a background build, one line each.
void print_pending(const cudnn::PlanCache& cache) {
  for (const cudnn::PlanInfo& e : cache.entries()) {
    if (e.pending) std::printf("SETTLE   pending: %s\n", e.graph.c_str());
  }
}

// Runs every case once on the GPU in every policy and layout, fused and
// unfused, so that each plan the checked runs need is queued; then waits for
// the background builds and swaps them in. Progress, one line per block and
// round, shows where a run stalls (the settle phase once took > 230 s).
void run_once_and_settle(const std::vector<Case>& cases, const Policies& policies, int round) {
  cudnn::PlanCache& cache = cudnn::PlanCache::global();
  for (const Case& c : cases) {
    const Tensor dy = zeros(output_sizes(c));
    for (const Policy& policy : policies) {
      NumericsGuard numerics({.precision = policy.precision});
      std::optional<AutocastGuard> autocast;
      if (policy.bf16) autocast.emplace(DType::BFloat16);
      for (MemoryFormat format : testing::kParityLayouts) {
        for (bool fused : {true, false}) {
          FusionGuard guard(fused);
          (void)run(c.block, c.inputs, testing::test_gpu(), format, dy, false);
        }
      }
    }
    std::printf("SETTLE %.1f s round %d: ran %s, %zu builds outstanding\n", seconds_since_start(), round,
                c.block.str().c_str(), cache.background_outstanding());
    std::fflush(stdout);
  }
  // The builds finish one at a time (0.7-2.9 s each on the H100): a line every
  // 10 s while they run shows the queue draining, or stuck.
  double printed = seconds_since_start();
  bool named = false;
  while (cache.background_outstanding() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (seconds_since_start() - printed < 10) continue;
    printed = seconds_since_start();
    std::printf("SETTLE %.1f s round %d: %zu builds outstanding\n", printed, round, cache.background_outstanding());
    if (!named) print_pending(cache);  // once: which graphs a stalled queue holds
    named = true;
    std::fflush(stdout);
  }
  cache.wait_for_background_builds();
  const int swapped = cache.apply_pending();
  std::printf("SETTLE %.1f s round %d: settled, %d plans swapped in\n", seconds_since_start(), round, swapped);
  std::fflush(stdout);
}

// Until a round meets no key it has not built: a swapped-in plan can change
// which graphs a block's later pieces meet (a fused forward, then its backward).
void build_plans(const std::vector<Case>& cases, const Policies& policies) {
  constexpr int kMaxRounds = 3;
  for (int round = 1; round <= kMaxRounds; ++round) {
    const int64_t before = started_late(cudnn::PlanCache::global().stats());
    run_once_and_settle(cases, policies, round);
    if (started_late(cudnn::PlanCache::global().stats()) == before) return;
  }
}

// The block fused and unfused on the GPU against the CPU, in every layout and given policy.
void check_block(const Case& c, const Policies& policies, Generator& gen) {
  const Block& block = c.block;
  const std::vector<Tensor>& inputs = c.inputs;
  CAPTURE(block.str());
  const Tensor dy = randn(output_sizes(c), {}, &gen);
  const Run cpu_fp32 = run(block, inputs, Device::cpu(), MemoryFormat::Contiguous, dy, true);
  const Run cpu_bf16 = run(block, rounded_like_autocast(block, inputs), Device::cpu(), MemoryFormat::Contiguous, dy, true);
  for (const Policy& policy : policies) {
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
        const Run gpu = run(block, inputs, testing::test_gpu(), format, dy, false);
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

}  // namespace

// How the head's backward ran in the block's latest run (the report's note), or "".
std::string head_backward_note(const Block& block) {
  for (const fusion::BlockReport& r : fusion::block_reports()) {
    if (r.block == block.str() && !r.pieces.empty()) return r.pieces[0].backward;
  }
  return "";
}

// Which of kBackwardTiers a note names (std::size(kBackwardTiers): none).
size_t tier_of(const std::string& note) {
  size_t tier = 0;
  while (tier < std::size(kBackwardTiers) && !note.starts_with(kBackwardTiers[tier])) ++tier;
  return tier;
}

// Every case's plans built (lazily, in parallel), then every case checked on them.
void check_blocks(const std::vector<Case>& cases, const Policies& policies, Generator& gen) {
  PlanBuildGuard lazy(PlanBuildMode::Lazy);
  // Every key a case meets must stay cached from its build to its checks (a
  // case meets a few hundred; the default capacity is 1024).
  cudnn::PlanCache::global().set_capacity(4096);
  build_plans(cases, policies);
  const int64_t lazy_before = started_late(cudnn::PlanCache::global().stats());
  for (const Case& c : cases) check_block(c, policies, gen);
  // Every checked run found its plans built: none started on a stand-in or the tier below.
  CHECK(started_late(cudnn::PlanCache::global().stats()) == lazy_before);
}

std::vector<Case> conv_activation_cases(Generator& gen, int half) {
  const std::span<const ActivationKind> rows(kernel::kActivationKinds);
  const size_t middle = (rows.size() + 1) / 2;
  Tensor x = randn({4, 16, 9, 7}, {}, &gen), w = randn({24, 16, 3, 3}, {}, &gen) * 0.1;
  Tensor b = randn({24}, {}, &gen);
  std::vector<Case> cases;
  for (ActivationKind kind : half == 0 ? rows.first(middle) : rows.subspan(middle)) {
    cases.push_back({Block().conv2d({.padding = {1, 1}}).bias().activation(kind), {x, w, b}});
  }
  return cases;
}

std::vector<Case> conv_chain_cases(Generator& gen) {
  Tensor x = randn({4, 16, 8, 8}, {}, &gen), w = randn({32, 16, 3, 3}, {}, &gen) * 0.1;
  Tensor gamma = rand({32}, {}, &gen) + 0.5, beta = randn({32}, {}, &gen), residual = randn({4, 32, 8, 8}, {}, &gen);
  const Block conv = Block().conv2d({.padding = {1, 1}});
  return {{Block(conv).batch_norm().add_residual().relu(), {x, w, gamma, beta, Tensor(), Tensor(), residual}},
          {Block(conv).batch_norm().gelu().add_residual(), {x, w, gamma, beta, Tensor(), Tensor(), residual}},
          {Block(conv).scale_bias().gelu(), {x, w, gamma, beta}},
          {Block(conv).mul(0.5).add(0.25).silu().add_residual(), {x, w, residual}},
          {Block(conv).mul(0.5).scale_bias().gelu().sub(0.125), {x, w, gamma, beta}},
          {Block(conv).bias().activation(ActivationKind::LeakyRelu, {0.2}).mul(1.5), {x, w, beta}},
          {Block(conv).batch_norm().activation(ActivationKind::Relu6), {x, w, gamma, beta, Tensor(), Tensor()}},
          {Block(conv).bias().activation(ActivationKind::Hardtanh, {-0.5, 2.0}).add_residual(), {x, w, beta, residual}}};
}

}  // namespace loom::fusion_parity

#endif  // LOOM_WITH_CUDA
