// File: tests/core/cudnn/training_step_gpu_test.cc
// One small CNN training step on the GPU (conv, batch norm, ReLU, max pool,
// linear, cross-entropy, backward, SGD update): its plan-cache statistics are
// printed for the issue note; the first step builds plans, the second builds
// none and only hits the cache.
//
// N batch, C channels, H, W, K classes.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdio>

#include "core/cudnn/plan_cache.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

struct SmallNet {
  Tensor w1, b1, gamma, beta, running_mean, running_var, w2, b2;

  explicit SmallNet(Generator& gen) {
    TensorOptions gpu{.device = testing::test_gpu()};
    w1 = mul(randn({16, 1, 3, 3}, {}, &gen), 0.3).to(testing::test_gpu()).requires_grad_(true);
    b1 = zeros({16}, gpu).requires_grad_(true);
    gamma = ones({16}, gpu).requires_grad_(true);
    beta = zeros({16}, gpu).requires_grad_(true);
    running_mean = zeros({16}, gpu);
    running_var = ones({16}, gpu);
    w2 = mul(randn({10, 16 * 14 * 14}, {}, &gen), 0.01).to(testing::test_gpu()).requires_grad_(true);
    b2 = zeros({10}, gpu).requires_grad_(true);
  }

  // x (N, 1, 28, 28) channels-last -> loss
  Tensor loss(const Tensor& x, const Tensor& y) {
    Tensor h = conv2d(x, w1, b1, {.padding = {1, 1}});
    h = relu(batch_norm(h, running_mean, running_var, gamma, beta, {.training = true}));
    h = max_pool2d(h, {.kernel_size = {2, 2}});
    return cross_entropy(linear(h.flatten(1), w2, b2), y);
  }

  void sgd_step(double lr) {
    NoGradGuard no_grad;
    for (Tensor* p : {&w1, &b1, &gamma, &beta, &w2, &b2}) {
      sub_(*p, p->grad(), lr);
      p->set_grad(Tensor());
    }
  }
};

}  // namespace

LOOM_GPU_TEST_CASE("the second training step builds no cuDNN plan") {
  Generator gen(61);
  SmallNet net(gen);
  Tensor x = randn({32, 1, 28, 28}, {}, &gen).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = randint(0, 10, {32}, {.dtype = DType::Int64}, &gen).to(testing::test_gpu());
  auto& cache = cudnn::PlanCache::global();
  cache.clear();
  net.loss(x, y).backward();
  net.sgd_step(0.1);
  cudnn::PlanCacheStats first = cache.stats();
  std::printf("step 1: %lld plans built, %lld misses, %lld hits, %.3f s building\n",
              static_cast<long long>(first.plans_built), static_cast<long long>(first.misses),
              static_cast<long long>(first.hits), first.build_seconds);
  Tensor loss = net.loss(x, y);
  loss.backward();
  net.sgd_step(0.1);
  cudnn::PlanCacheStats second = cache.stats();
  std::printf("step 2: %lld plans built, %lld misses, %lld hits (loss %.4f)\n",
              static_cast<long long>(second.plans_built - first.plans_built),
              static_cast<long long>(second.misses - first.misses),
              static_cast<long long>(second.hits - first.hits), loss.item());
  std::printf("%s", cache.explain().c_str());
  CHECK(first.plans_built > 0);
  CHECK(second.plans_built == first.plans_built);
  CHECK(second.misses == first.misses);
  CHECK(second.hits > first.hits);
}
#endif  // LOOM_WITH_CUDA
