// File: tests/core/autocast_gpu_test.cc
// The cache of parameter casts under autocast (core/autocast.h): a forward that
// reuses a cached cast gives the same values and gradients as one that casts
// anew (LOOM_AUTOCAST_CACHE=0); an in-place write to the parameter (an
// optimizer step, copy_) is seen by the next forward; a CUDA-graph replay that
// changes the parameter is seen by the next eager forward; inside a capture the
// cast is a node of the graph, so every replay recasts. Casting the same
// values is deterministic, so results must be equal (rtol = atol = 0).
//
// N batch, I in features, O out features.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <optional>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cuda/graph.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// Sets LOOM_AUTOCAST_CACHE for a scope ("1": on, "0": off), back to on after.
struct Model {
  Tensor w1, w2;  // (O, I) each: conv-free, linear layers reach autocast the same way
};

Model make_model(Generator& gen) {
  Model m{randn({32, 24}, {}, &gen).to(testing::test_gpu()), randn({10, 32}, {}, &gen).to(testing::test_gpu())};
  m.w1.requires_grad_();
  m.w2.requires_grad_();
  return m;
}

// Two micro-batches through the same weights per step, then an SGD step, all
// inside one autocast region (or, with region_per_step, a region per step's
// forwards, as a training loop writes it: each region's first cast recasts both
// weights from the ones the last region used): the second micro-batch reuses
// the cached casts, the step bumps the weights' versions. Returns each step's
// losses.
std::vector<double> train(Model& m, const std::vector<Tensor>& batches, int steps,
                          bool region_per_step = false) {
  std::vector<double> losses;
  const AutocastGuard whole(region_per_step ? std::nullopt : std::optional(DType::BFloat16));
  for (int step = 0; step < steps; ++step) {
    const AutocastGuard per_step(region_per_step ? std::optional(DType::BFloat16) : autocast_dtype());
    for (const Tensor& x : batches) {
      Tensor loss = sum(relu(linear(relu(linear(x, m.w1)), m.w2)).to(DType::Float32));
      loss.backward();
      losses.push_back(loss.item());
    }
    NoGradGuard no_grad;
    for (Tensor* w : {&m.w1, &m.w2}) {
      sub_(*w, w->grad() * 1e-3);
      Tensor grad = w->grad();
      grad.zero_();
    }
  }
  return losses;
}

}  // namespace

LOOM_GPU_TEST_CASE("autocast's cached weight casts train exactly as casting every time") {
  Generator gen(1203);
  const Model start = make_model(gen);
  const std::vector<Tensor> batches = {randn({8, 24}, {}, &gen).to(testing::test_gpu()),
                                       randn({8, 24}, {}, &gen).to(testing::test_gpu())};
  auto copy = [](const Model& m) {
    Model c{m.w1.detach().clone(), m.w2.detach().clone()};
    c.w1.requires_grad_();
    c.w2.requires_grad_();
    return c;
  };
  Model cached = copy(start), uncached = copy(start);
  std::vector<double> with_cache, without_cache;
  {
    const testing::ScopedEnv env("LOOM_AUTOCAST_CACHE", "1");
    with_cache = train(cached, batches, 4);
  }
  {
    const testing::ScopedEnv env("LOOM_AUTOCAST_CACHE", "0");
    without_cache = train(uncached, batches, 4);
  }
  CHECK(with_cache == without_cache);
  CHECK_CLOSE(cached.w1.cpu(), uncached.w1.cpu(), 0, 0);
  CHECK_CLOSE(cached.w2.cpu(), uncached.w2.cpu(), 0, 0);
  CHECK_FALSE(with_cache.front() == with_cache.back());  // the steps did change the weights
  Model per_step = copy(start);
  CHECK(train(per_step, batches, 4, /*region_per_step=*/true) == without_cache);
  CHECK_CLOSE(per_step.w1.cpu(), uncached.w1.cpu(), 0, 0);
}

// A region remembers which parameters it cast; a parameter freed since (a
// model thrown away) is forgotten, and a new one, possibly at the freed
// storage's address, is cast from its own values.
LOOM_GPU_TEST_CASE("autocast regions cast parameters freed and made since from their own values") {
  Generator gen(1207);
  const Tensor x = randn({4, 24}, {}, &gen).to(testing::test_gpu());
  for (int round = 0; round < 3; ++round) {
    Model m = make_model(gen);
    for (int region = 0; region < 2; ++region) {
      const AutocastGuard autocast(DType::BFloat16);
      NoGradGuard no_grad;
      const Tensor y = linear(relu(linear(x, m.w1)), m.w2);
      const Tensor h = relu(linear(x.to(DType::BFloat16), m.w1.detach().to(DType::BFloat16)));
      const Tensor expected = linear(h, m.w2.detach().to(DType::BFloat16));
      CHECK_CLOSE(y.to(DType::Float32).cpu(), expected.to(DType::Float32).cpu(), 0, 0);
      m.w2.copy_(m.w2 * 3);
    }
  }
}

LOOM_GPU_TEST_CASE("an in-place write to a parameter is seen by the next autocast forward") {
  Generator gen(1204);
  Model m = make_model(gen);
  const Tensor x = randn({4, 24}, {}, &gen).to(testing::test_gpu());
  AutocastGuard autocast(DType::BFloat16);
  NoGradGuard no_grad;
  const Tensor before = linear(x, m.w1);
  m.w1.copy_(m.w1 * 2);
  const Tensor after = linear(x, m.w1);
  const Tensor expected = linear(x.to(DType::BFloat16), m.w1.detach().to(DType::BFloat16));
  CHECK_CLOSE(after.to(DType::Float32).cpu(), expected.to(DType::Float32).cpu(), 0, 0);
  CHECK_CLOSE(after.to(DType::Float32).cpu(), (before * 2).to(DType::Float32).cpu(), 0, 0);
}

LOOM_GPU_TEST_CASE("a captured step recasts on every replay, and eager forwards see the replays") {
  Generator gen(1205);
  Model m = make_model(gen);
  const Tensor x = randn({4, 24}, {}, &gen).to(testing::test_gpu());
  AutocastGuard autocast(DType::BFloat16);
  NoGradGuard no_grad;
  Tensor out = empty({4, 32}, {.dtype = DType::BFloat16, .device = testing::test_gpu()});
  const Tensor eager_before = linear(x, m.w1);  // fills the cache
  DeviceGuard on_test_gpu(testing::test_gpu());  // a graph captures the current device's stream
  cuda::CudaGraph graph;
  graph.capture([&] {
    out.copy_(linear(x, m.w1));
    m.w1.copy_(m.w1 * 0.5);
  });
  // Cached now, at the version the capture's host pass left: only the replay
  // count can tell that the replays below change w1.
  const Tensor eager_before_replays = linear(x, m.w1);
  for (int replay = 0; replay < 3; ++replay) {
    const Tensor w_now = m.w1.detach().clone();
    graph.replay();
    const Tensor expected = linear(x.to(DType::BFloat16), w_now.to(DType::BFloat16));
    CHECK_CLOSE(out.to(DType::Float32).cpu(), expected.to(DType::Float32).cpu(), 0, 0);
  }
  const Tensor eager_after = linear(x, m.w1);  // after replays that halved w1 without a version bump
  const Tensor expected = linear(x.to(DType::BFloat16), m.w1.detach().to(DType::BFloat16));
  CHECK_CLOSE(eager_after.to(DType::Float32).cpu(), expected.to(DType::Float32).cpu(), 0, 0);
  CHECK_FALSE(testing::values(eager_after) == testing::values(eager_before_replays));
  CHECK(testing::values(eager_before_replays) == testing::values(eager_before));  // no replay yet
}

#endif  // LOOM_WITH_CUDA
