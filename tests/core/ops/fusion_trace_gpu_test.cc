// File: tests/core/ops/fusion_trace_gpu_test.cc
// Fusion by tracing on the GPU: random user-style networks (fusion_trace_nets.h)
// traced and as written, each against the CPU's float64 run of the same
// network, forward and every gradient, under strict fp32, tf32 and bf16
// autocast, NCHW and channels-last. The traced run must be as close to the
// CPU as the policy allows, or no further than twice the untraced run's error
// (errors compound through a random stack of layers); gradients may pass as
// decision flips under tf32 and bf16, or, one by one, as within the policy's
// tolerance of the untraced run's: bf16 takes some gradients far from float64
// (0.31 of their scale, batch-norm biases of a deep chain), traced or not, and
// which of their few elements count as flips differs between the two runs.
// And optim::TrainStep with tracing on:
// the captured steps of a basic block written as a custom module run its
// three chains as blocks and follow the untraced steps' losses.
//
// N batch, C channels, H, W.
#include "core/ops/fusion_trace.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/fused.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/sgd.h"
#include "optim/train_step.h"
#include "tests/core/ops/fusion_trace_nets.h"
#include "tests/testing.h"

namespace loom {
namespace {

using testing::kChannels;
using testing::kTraceSize;
using testing::ParityPolicy;
using testing::RandomNet;

// grads: the input's gradient, then each parameter's, named in names.
struct Run {
  Tensor y;
  std::vector<Tensor> grads;
  std::vector<std::string> names;
  int64_t blocks = 0;
};

// x1 (traced when `traced`), then x2 under the plan, and x2's backward; results as float64 on the CPU.
Run run_net(RandomNet& net, const Tensor& x1, const Tensor& x2, bool traced, std::string* plan_text = nullptr) {
  fusion::TracedPlan plan;
  if (traced) {
    trace::Recorder recorder;
    Tensor y1 = net(x1);
    plan = fusion::TracedPlan::from_trace(recorder.ops(), {y1});
    if (plan_text != nullptr) *plan_text = plan.str();
  } else {
    net(x1);
  }
  Run r;
  Tensor x = x2.detach().clone().requires_grad_(true);
  {
    std::optional<fusion::TracedRun> run;
    if (traced) run.emplace(plan);
    r.y = net(x);
    if (run) {
      run->finish();
      r.blocks = run->blocks_run();
    }
  }
  Tensor y32 = r.y.to(DType::Float32);
  mul(y32, y32).sum().backward();
  auto f64 = [](const Tensor& t) { return t.defined() ? t.cpu().to(DType::Float64) : Tensor(); };
  r.names.push_back("input");
  r.grads.push_back(f64(x.grad()));
  for (const auto& [name, p] : net.named_parameters()) {
    r.names.push_back(name);
    r.grads.push_back(f64(p.grad()));
  }
  r.y = f64(r.y);
  return r;
}

// The error of a gradient, or 0 when it differs only by decision flips (tf32, bf16).
double grad_error(const Tensor& actual, const Tensor& expected, const ParityPolicy& policy) {
  if (!expected.defined()) return 0;
  const double error = testing::normalized_error(actual, expected);
  const bool flips = policy.precision != Precision::StrictFp32 && error > policy.bwd &&
                     testing::decision_flips(actual, expected, policy.bwd);
  return flips ? 0 : error;
}

double worst_grad_error(const Run& run, const Run& cpu, const ParityPolicy& policy) {
  double worst = 0;
  for (size_t i = 0; i < cpu.grads.size(); ++i) worst = std::max(worst, grad_error(run.grads[i], cpu.grads[i], policy));
  return worst;
}

bool grad_ok(const Tensor& traced, const Tensor& untraced, const Tensor& cpu, const ParityPolicy& policy) {
  if (!cpu.defined()) return true;
  return grad_error(traced, cpu, policy) <= std::max(policy.bwd, 2 * grad_error(untraced, cpu, policy)) ||
         testing::normalized_error(traced, untraced) <= policy.bwd;
}

bool grads_ok(const Run& traced, const Run& untraced, const Run& cpu, const ParityPolicy& policy) {
  bool ok = true;
  for (size_t i = 0; i < cpu.grads.size(); ++i) ok &= grad_ok(traced.grads[i], untraced.grads[i], cpu.grads[i], policy);
  return ok;
}

// Each gradient's error, traced and untraced (after and before excusing decision flips), and
// traced against untraced: which gradient a failed backward check comes from.
std::string grad_table(const Run& traced, const Run& untraced, const Run& cpu, const ParityPolicy& policy) {
  std::string table = "gradient: traced (raw) | untraced (raw) | traced vs untraced\n";
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    const Tensor &t = traced.grads[i], &u = untraced.grads[i], &c = cpu.grads[i];
    if (!c.defined()) continue;
    table += fmt::format("{}: {:.4g} ({:.4g}) | {:.4g} ({:.4g}) | {:.4g}\n", cpu.names[i], grad_error(t, c, policy),
                         testing::normalized_error(t, c), grad_error(u, c, policy), testing::normalized_error(u, c),
                         testing::normalized_error(t, u));
  }
  return table;
}

void check_policy(const ParityPolicy& policy, MemoryFormat format, uint64_t seed) {
  CAPTURE(policy.name);
  CAPTURE(seed);
  CAPTURE(format == MemoryFormat::ChannelsLast);
  Generator gen(seed);
  const Shape shape = {4, kChannels, kTraceSize, kTraceSize};
  Tensor x1 = randn(shape, {.dtype = DType::Float64}, &gen), x2 = randn(shape, {.dtype = DType::Float64}, &gen);
  RandomNet reference(seed);
  reference.to(DType::Float64);
  const Run cpu = run_net(reference, x1, x2, false);

  const Device gpu = testing::test_gpu();
  auto on_gpu = [&](const Tensor& t) { return t.to(DType::Float32).to(gpu).contiguous(format); };
  NumericsGuard numerics({.precision = policy.precision});
  std::optional<AutocastGuard> autocast;
  if (policy.bf16) autocast.emplace(DType::BFloat16);
  Run runs[2];
  std::string plan;
  for (bool traced : {false, true}) {
    RandomNet net(seed);
    net.to(gpu);
    net.to(format);
    runs[traced] = run_net(net, on_gpu(x1), on_gpu(x2), traced, &plan);
  }
  const Run& untraced = runs[0];
  const Run& traced = runs[1];
  CAPTURE(plan);
  CHECK(traced.blocks >= RandomNet(seed).guaranteed_chains());
  const bool pool_layout = format == MemoryFormat::ChannelsLast && RandomNet(seed).pools_before_flatten();
  CHECK((plan.find("layout max_pool2d") != std::string::npos) == pool_layout);
  const double fwd_untraced = testing::normalized_error(untraced.y, cpu.y);
  const double fwd_traced = testing::normalized_error(traced.y, cpu.y);
  const double bwd_untraced = worst_grad_error(untraced, cpu, policy);
  const double bwd_traced = worst_grad_error(traced, cpu, policy);
  std::printf("TRACED %s %s seed %llu chains %lld fwd %.3g (untraced %.3g) bwd %.3g (untraced %.3g)\n", policy.name,
              format == MemoryFormat::ChannelsLast ? "nhwc" : "nchw", static_cast<unsigned long long>(seed),
              static_cast<long long>(traced.blocks), fwd_traced, fwd_untraced, bwd_traced, bwd_untraced);
  CHECK(fwd_traced <= std::max(policy.fwd, 2 * fwd_untraced));
  const bool bwd_ok = grads_ok(traced, untraced, cpu, policy);
  CHECK_MESSAGE(bwd_ok, (bwd_ok ? std::string() : grad_table(traced, untraced, cpu, policy)));
}

TEST_CASE("fusion by tracing on the GPU: random networks against the CPU in float64, every policy and layout") {
  if (!testing::test_gpu_available()) return;
  // LOOM_SWEEP_SEEDS (the parity sweep's variable; its first seed) draws other networks.
  const char* env = std::getenv("LOOM_SWEEP_SEEDS");
  std::mt19937_64 seeds(env != nullptr ? std::stoull(env) : 20261128);
  for (const ParityPolicy& policy : {testing::kStrictFp32Parity, testing::kTf32Parity, testing::kBf16Parity}) {
    for (MemoryFormat format : testing::kParityLayouts) {
      for (int trial = 0; trial < 6; ++trial) check_policy(policy, format, seeds());
    }
  }
}

TEST_CASE("fusion by tracing in TrainStep: a custom basic block's captured steps run its chains as blocks") {
  if (!testing::test_gpu_available()) return;
  const Device gpu = testing::test_gpu();
  Generator gen(7);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 2; ++i) {
    xs.push_back(randn({8, 3, 16, 16}, {.device = gpu}, &gen).contiguous(MemoryFormat::ChannelsLast));
    ys.push_back(randint(0, 4, {8}, {.dtype = DType::Int64, .device = gpu}, &gen));
  }
  NumericsGuard numerics({.precision = Precision::StrictFp32});
  std::vector<std::vector<double>> losses(2);
  for (bool traced : {false, true}) {
    manual_seed(11);
    testing::BasicBlock block;
    block.to(gpu);
    block.to(MemoryFormat::ChannelsLast);
    optim::SGD sgd(block.parameters(), {.lr = 0.05, .momentum = 0.9});
    optim::TrainStep step(
        [&](const Tensor& x, const Tensor& y) {
          return std::vector<Tensor>{cross_entropy(mean(block(x), {2, 3}), y)};
        },
        sgd, {.trace_fusion = traced});  // on is the default
    for (int i = 0; i < 6; ++i) {
      losses[traced].push_back(step(xs[i % 2], ys[i % 2])[0].item());
      // Traced: step 0 traces, step 1 runs the chains eagerly (building their plans), then captures.
      if (i >= (traced ? 2 : 1)) CHECK_MESSAGE(step.last_step_replayed(), step.fallback_reason());
    }
    CHECK(step.traced_plan().chains().size() == (traced ? 3u : 0u));
    if (traced) MESSAGE(step.traced_plan().str());
  }
  for (size_t i = 0; i < losses[0].size(); ++i) {
    CAPTURE(i);
    CHECK(losses[1][i] == doctest::Approx(losses[0][i]).epsilon(1e-4));
  }
}

}  // namespace
}  // namespace loom
