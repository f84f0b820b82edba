// File: tests/core/ops/fusion_trace_test.cc
// Fusion by tracing on the CPU, in float64: networks drawn at random (custom
// modules whose forward calls conv2d, batch_norm, activation rows, residual
// and broadcast adds, in random orders and layouts, with uses that must break
// a chain) run traced and as written; outputs, every gradient and the running
// statistics agree, and the plan holds the chains the structure guarantees.
// Also: a ResNet basic block written as users write it, the errors when a
// forward leaves its trace, a head that no longer matches, and max pools
// before a flatten, which traced runs have write a contiguous output.
//
// N batch, C channels, H, W.
#include "core/ops/fusion_trace.h"

#include <doctest/doctest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/ops/fused.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/core/ops/fusion_trace_nets.h"
#include "tests/testing.h"

namespace loom {
namespace {

using testing::BasicBlock;
using testing::kChannels;
using testing::RandomNet;
using Rng = std::mt19937_64;

struct Outcome {
  Tensor y, dx;
  std::vector<Tensor> grads, buffers;
  int64_t blocks = 0;
  int chains = 0;
  size_t contiguous_pools = 0;
};

// Two forwards (the first traced when `traced`, the second run under its plan)
// and the second's backward.
Outcome run_net(RandomNet& net, const Tensor& x1, const Tensor& x2, bool traced) {
  Outcome out;
  fusion::TracedPlan plan;
  if (traced) {
    trace::Recorder recorder;
    Tensor y1 = net(x1);
    plan = fusion::TracedPlan::from_trace(recorder.ops(), {y1});
  } else {
    net(x1);
  }
  Tensor x = x2.detach().clone().requires_grad_(true);
  if (traced) {
    fusion::TracedRun run(plan);
    out.y = net(x);
    run.finish();
    out.blocks = run.blocks_run();
  } else {
    out.y = net(x);
  }
  out.chains = static_cast<int>(plan.chains().size());
  out.contiguous_pools = plan.contiguous_pools().size();
  mul(out.y, out.y).sum().backward();
  out.dx = x.grad();
  for (const Tensor& p : net.parameters()) out.grads.push_back(p.grad());
  for (const auto& [name, b] : net.named_buffers()) out.buffers.push_back(b.clone());
  return out;
}

void check_close(const Tensor& actual, const Tensor& expected, const std::string& what) {
  REQUIRE(actual.defined() == expected.defined());
  if (!actual.defined()) return;
  const std::string report = testing::close_report(actual, expected, 1e-9, 1e-11);
  CHECK_MESSAGE(report.empty(), what << ": " << report);
}

TEST_CASE("fusion by tracing: random user-style networks, traced vs as written, float64") {
  Generator gen(20261128);
  Rng seeds(20261128);
  int total_chains = 0, traced_pools = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const uint64_t seed = seeds();
    const bool channels_last = trial % 2 == 1;
    CAPTURE(trial);
    CAPTURE(seed);
    CAPTURE(channels_last);
    RandomNet as_written(seed), traced(seed);
    as_written.to(DType::Float64);
    traced.to(DType::Float64);
    if (channels_last) {
      as_written.to(MemoryFormat::ChannelsLast);
      traced.to(MemoryFormat::ChannelsLast);
    }
    TensorOptions options{.dtype = DType::Float64,
                          .memory_format = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous};
    Tensor x1 = randn({3, kChannels, testing::kTraceSize, testing::kTraceSize}, options, &gen);
    Tensor x2 = randn({3, kChannels, testing::kTraceSize, testing::kTraceSize}, options, &gen);
    const Outcome want = run_net(as_written, x1, x2, false);
    const Outcome got = run_net(traced, x1, x2, true);
    CHECK(got.chains >= traced.guaranteed_chains());
    CHECK(got.blocks == got.chains);  // every chain ran as one block
    CHECK(got.contiguous_pools == (channels_last && traced.pools_before_flatten() ? 1U : 0U));
    traced_pools += static_cast<int>(got.contiguous_pools);
    total_chains += got.chains;
    check_close(got.y, want.y, "output");
    check_close(got.dx, want.dx, "dx");
    REQUIRE(got.grads.size() == want.grads.size());
    for (size_t i = 0; i < got.grads.size(); ++i) check_close(got.grads[i], want.grads[i], "grad " + std::to_string(i));
    REQUIRE(got.buffers.size() == want.buffers.size());
    for (size_t i = 0; i < got.buffers.size(); ++i) {
      check_close(got.buffers[i], want.buffers[i], "buffer " + std::to_string(i));
    }
  }
  CHECK(total_chains > 80);  // the draws do reach chains of every kind
  CHECK(traced_pools >= 4);  // and channels-last pools before the flatten
}

TEST_CASE("fusion by tracing: a basic block written as a custom module") {
  manual_seed(3);
  BasicBlock net;
  net.to(DType::Float64);
  fusion::Traced traced([&](const Tensor& x) { return net(x); });
  Tensor x = randn({2, 3, 8, 8}, {.dtype = DType::Float64});
  traced(x);
  const fusion::TracedPlan& plan = traced.plan();
  REQUIRE(plan.chains().size() == 3);
  CHECK(plan.chains()[0].block == "conv2d(stride=2, padding=1) -> batch_norm -> relu");
  CHECK(plan.chains()[0].module == "conv1");
  CHECK(plan.chains()[1].block == "conv2d(stride=1, padding=1) -> batch_norm -> add_residual -> relu");
  CHECK(plan.chains()[2].module == "shortcut.0");
  CHECK(plan.str().find("fused  conv2") != std::string::npos);
  CHECK(fusion::traced_plans_str().find("Traced (2, 3, 8, 8)") != std::string::npos);

  manual_seed(3);
  BasicBlock reference;
  reference.to(DType::Float64);
  reference(x);  // the same running statistics as the traced call left
  Tensor x2 = randn({2, 3, 8, 8}, {.dtype = DType::Float64});
  check_close(traced(x2), reference(x2), "second call");
  {
    FusionGuard off(false);  // runs as written: the same values
    check_close(traced(x2), reference(x2), "third call, fusion off");
  }
  Tensor other = randn({1, 3, 6, 6}, {.dtype = DType::Float64});  // a new shape: traced again
  check_close(traced(other), reference(other), "new shape");
  CHECK(traced.plan().chains().size() == 3);
}

Tensor conv_bn_relu(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& var) {
  return relu(batch_norm(conv2d(x, w, Tensor(), {.padding = 1}), mean, var, Tensor(), Tensor(), {}));
}

TEST_CASE("fusion by tracing: a residual add of an integer or wider operand stays outside the block") {
  Tensor w = randn({4, 3, 3, 3}), mean = zeros({4}), var = ones({4});
  const Tensor x = randn({2, 3, 5, 5});
  for (const Tensor& other : {randint(-3, 4, {2, 4, 5, 5}, {.dtype = DType::Int64}),
                              randn({2, 4, 5, 5}, {.dtype = DType::Float64}), randn({2, 4, 5, 5})}) {
    CAPTURE(dtype_name(other.dtype()));
    const auto forward = [&](const Tensor& in) { return add(conv_bn_relu(in, w, mean, var), other); };
    fusion::Traced traced(forward);
    const Tensor expected = forward(x);
    const Tensor actual = traced(x);
    CHECK(actual.dtype() == expected.dtype());
    CHECK_CLOSE(actual, expected, 1e-6, 1e-6);
    REQUIRE(traced.plan().chains().size() == 1);
    const bool joins = other.dtype() == DType::Float32;  // the chain's own dtype: the add fuses
    CAPTURE(traced.plan().chains()[0].block);
    CHECK((traced.plan().chains()[0].block.find("-> add") != std::string::npos) == joins);
  }
}

TEST_CASE("fusion by tracing: a forward that leaves its trace is an error, a changed head runs unfused") {
  const TensorOptions f64{.dtype = DType::Float64};
  Tensor w = randn({4, 3, 3, 3}, f64), mean = zeros({4}, f64), var = ones({4}, f64);
  Tensor x = randn({2, 3, 5, 5}, f64);
  fusion::TracedPlan plan;
  {
    trace::Recorder recorder;
    Tensor y = conv_bn_relu(x, w, mean, var);
    plan = fusion::TracedPlan::from_trace(recorder.ops(), {y});
  }
  REQUIRE(plan.chains().size() == 1);
  CHECK(plan.chains()[0].names == std::vector<std::string>{"conv2d", "batch_norm", "relu"});

  SUBCASE("the chain's middle used by another op") {
    fusion::TracedRun run(plan);
    Tensor h = conv2d(x, w, Tensor(), {.padding = 1});
    CHECK_THROWS_WITH_AS(h.sum(), doctest::Contains("has no data"), ValueError);
  }
  SUBCASE("a chain begun and not ended") {
    fusion::TracedRun run(plan);
    Tensor h = conv2d(x, w, Tensor(), {.padding = 1});
    CHECK_THROWS_WITH_AS(run.finish(), doctest::Contains("never ran"), ValueError);
  }
  SUBCASE("a head with another input shape runs as written") {
    Tensor small = randn({1, 3, 4, 4}, f64);
    Tensor want = conv_bn_relu(small, w, mean, var);
    fusion::TracedRun run(plan);
    Tensor got = conv_bn_relu(small, w, mean, var);
    run.finish();
    CHECK(run.blocks_run() == 0);
    check_close(got, want, "unfused run");
  }
  SUBCASE("a returned middle is never fused") {
    trace::Recorder recorder;
    Tensor h = conv2d(x, w, Tensor(), {.padding = 1});
    Tensor y = relu(h);
    const fusion::TracedPlan kept = fusion::TracedPlan::from_trace(recorder.ops(), {y, h});
    CHECK(kept.chains().empty());
    REQUIRE(kept.unfused().size() == 1);
    CHECK(kept.unfused()[0].find("is returned") != std::string::npos);
  }
  SUBCASE("traces do not nest") {
    fusion::TracedRun run(plan);
    CHECK_THROWS_AS(trace::Recorder(), ValueError);
  }
}

// conv2d -> relu -> max_pool2d -> flatten -> linear, as LeNet's head is
// written; `pooled` gets the pool's output, `extra_use` adds a second use of it.
struct PoolHead {
  Tensor w, b, lw, lb;
  Pool2dOptions pool;
  bool extra_use = false;
  int64_t flatten_from = 1;
  Tensor pooled;

  Tensor operator()(const Tensor& x) {
    pooled = max_pool2d(relu(conv2d(x, w, b, {.padding = 1})), pool);
    Tensor y = linear(pooled.flatten(flatten_from).flatten(1), lw, lb);
    return extra_use ? add(y, pooled.sum()) : y;
  }
};

TEST_CASE("fusion by tracing: a max pool before a flatten writes its output contiguous, random shapes") {
  Generator gen(20261204);
  Rng rng(20261204);
  auto draw = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const TensorOptions f64{.dtype = DType::Float64};
  int marked = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t n = draw(1, 3), c = draw(2, 5), k = draw(2, 6), side = draw(3, 9), window = draw(1, 3);
    PoolHead head;
    head.pool = {.kernel_size = {window, draw(1, 3)}, .stride = std::array<int64_t, 2>{draw(1, 3), draw(1, 3)},
                 .ceil_mode = draw(0, 1) == 1};
    head.pool.padding = {draw(0, head.pool.kernel_size[0] / 2), draw(0, head.pool.kernel_size[1] / 2)};
    const int variant = trial % 4;  // 0, 1: a flatten only; 2: a second use; 3: flatten(2) first
    head.extra_use = variant == 2;
    head.flatten_from = variant == 3 ? 2 : 1;
    const bool channels_last = trial % 8 != 7;
    const MemoryFormat format = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    head.w = randn({k, c, 3, 3}, f64, &gen);
    head.b = randn({k}, f64, &gen);
    const Tensor x1 = randn({n, c, side, side}, f64, &gen).contiguous(format);
    const Tensor x2 = randn({n, c, side, side}, f64, &gen).contiguous(format);
    const Shape pooled_sizes = max_pool2d(zeros({n, k, side, side}, f64), head.pool).sizes();
    const Tensor lw = randn({4, pooled_sizes[1] * pooled_sizes[2] * pooled_sizes[3]}, f64, &gen);
    head.lw = lw;
    head.lb = randn({4}, f64, &gen);
    CAPTURE(trial);
    CAPTURE(shape_str(pooled_sizes));
    CAPTURE(channels_last);
    fusion::TracedPlan plan;
    {
      trace::Recorder recorder;
      Tensor y = head(x1);
      plan = fusion::TracedPlan::from_trace(recorder.ops(), {y});
    }
    const bool expected = channels_last && variant < 2 && pooled_sizes[2] * pooled_sizes[3] > 1;
    CHECK(plan.contiguous_pools().size() == (expected ? 1u : 0u));
    CHECK((plan.str().find("layout max_pool2d") != std::string::npos) == expected);
    marked += expected ? 1 : 0;

    // One run as written, one under the plan: a fresh x and linear weight each, for their gradients.
    auto run = [&](bool traced, MemoryFormat pooled_format) {
      Tensor x = x2.clone(format).requires_grad_(true);
      head.lw = lw.clone().requires_grad_(true);
      Tensor y;
      {
        std::optional<fusion::TracedRun> substitute;
        if (traced) substitute.emplace(plan);
        y = head(x);
        if (traced) substitute->finish();
      }
      CHECK(head.pooled.is_contiguous(pooled_format));
      mul(y, y).sum().backward();
      return std::vector<Tensor>{y, x.grad(), head.lw.grad()};
    };
    const std::vector<Tensor> want = run(false, format);
    const std::vector<Tensor> got = run(true, expected ? MemoryFormat::Contiguous : format);
    check_close(got[0], want[0], "output");
    check_close(got[1], want[1], "dx");
    check_close(got[2], want[2], "linear weight grad");
  }
  CHECK(marked >= 8);

  SUBCASE("a layout the caller chose stays") {
    PoolHead head;
    head.pool = {.kernel_size = {2, 2}, .output_format = MemoryFormat::ChannelsLast};
    head.w = randn({3, 2, 3, 3}, f64, &gen);
    head.b = randn({3}, f64, &gen);
    head.lw = randn({4, 3 * 3 * 3}, f64, &gen);
    head.lb = randn({4}, f64, &gen);
    Tensor x = randn({2, 2, 6, 6}, f64, &gen).contiguous(MemoryFormat::ChannelsLast);
    trace::Recorder recorder;
    Tensor y = head(x);
    CHECK(fusion::TracedPlan::from_trace(recorder.ops(), {y}).contiguous_pools().empty());
  }
}

}  // namespace
}  // namespace loom
