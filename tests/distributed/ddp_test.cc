// File: tests/distributed/ddp_test.cc
// nn::DistributedDataParallel over MPI between the ranks of `mpirun.sh N`
// (N >= 2): N ranks with B samples each train like one process with the
// global batch of N * B (SyncBatchNorm's statistics too). On the CPU by
// default; with LOOM_DISTRIBUTED_TEST_DEVICE=cuda each rank trains on its GPU over
// NCCL (strict fp32, so that the only difference left is the order of the
// sums), and captured bf16 TrainSteps are compared as well.
#include "distributed/ddp.h"

#include <doctest/doctest.h>

#include "core/autocast.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "distributed/sync_batch_norm.h"
#include "layers/nn.h"
#include "optim/sgd.h"
#include "optim/train_step.h"
#include "tests/distributed/world.h"
#include "tests/testing.h"

using namespace loom;
using loom::testing::world;

namespace {

constexpr int64_t kPerRank = 4, kIn = 8, kClasses = 5;

Device device() { return world()->device(); }

std::shared_ptr<nn::Sequential> make_net(uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>(nn::Linear(kIn, 16), nn::ReLU(), nn::Linear(16, 16),
                                              nn::ReLU(), nn::Linear(16, kClasses));
  net->to(device());
  return net;
}

struct GlobalBatch {
  Tensor x, y;  // (N * kPerRank, kIn), (N * kPerRank,)
  Tensor local_x() const { return x.narrow(0, world()->rank() * kPerRank, kPerRank); }
  Tensor local_y() const { return y.narrow(0, world()->rank() * kPerRank, kPerRank); }
};

// The same global batch on every rank (a shared seed).
GlobalBatch global_batch(int step) {
  Generator gen(1000 + step);
  const int64_t n = world()->size() * kPerRank;
  return {randn({n, kIn}, {}, &gen).to(device()),
          randint(0, kClasses, {n}, {.dtype = DType::Int64}, &gen).to(device())};
}

// A model with a parameter the forward never uses.
class HalfUsed final : public nn::Module {
 public:
  HalfUsed() {
    used_ = register_module("used", std::make_shared<nn::Linear>(kIn, kClasses));
    register_module("unused", std::make_shared<nn::Linear>(kIn, kClasses));
  }
  Tensor forward(const Tensor& x) override { return (*used_)(x); }
  std::string type_name() const override { return "HalfUsed"; }

 private:
  std::shared_ptr<Module> used_;
};

}  // namespace

TEST_CASE("DDP: N ranks match one process with the global batch after 5 SGD steps") {
  // fp32; the difference is only the order of the sums (mean of local means vs
  // one mean), so rtol 1e-5, atol 1e-6 is ample.
  NumericsGuard strict({.precision = Precision::StrictFp32});
  for (double bucket_mb : {25.0, 0.001}) {  // one bucket, and one or two parameters per bucket
    CAPTURE(bucket_mb);
    auto reference = make_net(0);
    // Every rank starts from different weights: the constructor's broadcast fixes that.
    auto replica = make_net(world()->rank() == 0 ? 0 : 77 + world()->rank());
    nn::DistributedDataParallel ddp(replica, world(), {.bucket_cap_mb = bucket_mb});
    if (bucket_mb < 1) CHECK(ddp.bucket_layout().size() >= 3);
    CHECK(ddp.bucket_layout().front().front() == "4.bias");  // reverse order: the last layer first
    optim::SGD opt_ref(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt(replica->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int step = 0; step < 5; ++step) {
      GlobalBatch batch = global_batch(step);
      opt_ref.zero_grad();
      cross_entropy((*reference)(batch.x), batch.y).backward();
      opt_ref.step();
      opt.zero_grad();
      cross_entropy(ddp(batch.local_x()), batch.local_y()).backward();
      opt.step();
    }
    StateDict expected = reference->state_dict(), actual = replica->state_dict();
    REQUIRE(expected.size() == actual.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      CAPTURE(expected[i].first);
      CHECK_CLOSE(actual[i].second, expected[i].second, 1e-5, 1e-6);
    }
  }
}

TEST_CASE("DDP: no_sync accumulates locally; the next backward averages the sum") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  auto reference = make_net(3);
  auto replica = make_net(3);
  nn::DistributedDataParallel ddp(replica, world());
  GlobalBatch first = global_batch(10), second = global_batch(11);
  cross_entropy((*reference)(first.x), first.y).backward();
  cross_entropy((*reference)(second.x), second.y).backward();
  {
    auto guard = ddp.no_sync();
    cross_entropy(ddp(first.local_x()), first.local_y()).backward();
  }
  cross_entropy(ddp(second.local_x()), second.local_y()).backward();
  nn::NamedTensors expected = reference->named_parameters(), actual = replica->named_parameters();
  for (size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(expected[i].first);
    CHECK_CLOSE(actual[i].second.grad(), expected[i].second.grad(), 1e-5, 1e-6);
  }
}

TEST_CASE("DDP: replicas whose models differ are refused at construction" *
          doctest::skip(loom::testing::single_rank())) {
  manual_seed(0);
  auto net = std::make_shared<nn::Sequential>(nn::Linear(kIn, world()->rank() == 0 ? 4 : 5));
  net->to(device());
  CHECK_THROWS_WITH_FRAGMENT(nn::DistributedDataParallel(net, world()),
                             ShapeError, "the ranks' shapes differ");
}

TEST_CASE("DDP: a parameter without a gradient is named at the next forward") {
  manual_seed(0);
  auto net = std::make_shared<HalfUsed>();
  net->to(device());
  nn::DistributedDataParallel ddp(net, world());
  GlobalBatch batch = global_batch(0);
  cross_entropy(ddp(batch.local_x()), batch.local_y()).backward();
  CHECK_THROWS_WITH_FRAGMENT(ddp(batch.local_x()), AutogradError,
                             "no gradient for unused.bias, unused.weight");
}

namespace {

// x (B, 3, 6, 6) -> logits (B, kClasses) through a batch norm.
std::shared_ptr<nn::Sequential> make_bn_net(uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>(nn::Conv2d(3, 4, 3, {.padding = 1}),
                                              nn::BatchNorm2d(4), nn::ReLU(), nn::Flatten(),
                                              nn::Linear(4 * 6 * 6, kClasses));
  net->to(device());
  return net;
}

GlobalBatch global_images(int step) {
  Generator gen(2000 + step);
  const int64_t n = world()->size() * kPerRank;
  // A mean and spread per channel far from 0 and 1: statistics must really be global.
  return {(randn({n, 3, 6, 6}, {}, &gen) * 3.0 + 5.0).to(device()),
          randint(0, kClasses, {n}, {.dtype = DType::Int64}, &gen).to(device())};
}

}  // namespace

TEST_CASE("SyncBatchNorm: N ranks under DDP match one process with BatchNorm2d on the global batch") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  auto reference = make_bn_net(5);
  auto replica = make_bn_net(5);
  nn::convert_sync_batchnorm(replica, world());
  nn::DistributedDataParallel ddp(replica, world());
  optim::SGD opt_ref(reference->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt(replica->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < 4; ++step) {
    GlobalBatch batch = global_images(step);
    opt_ref.zero_grad();
    cross_entropy((*reference)(batch.x), batch.y).backward();
    opt_ref.step();
    opt.zero_grad();
    cross_entropy(ddp(batch.local_x()), batch.local_y()).backward();
    opt.step();
  }
  // Parameters and the running statistics (global ones on every rank) agree.
  StateDict expected = reference->state_dict(), actual = replica->state_dict();
  REQUIRE(expected.size() == actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(expected[i].first);
    CHECK_CLOSE(actual[i].second.to(DType::Float64), expected[i].second.to(DType::Float64), 1e-4,
                1e-5);
  }
  // Evaluation uses the running statistics, as BatchNorm2d's.
  replica->eval();
  reference->eval();
  GlobalBatch batch = global_images(9);
  CHECK_CLOSE((*replica)(batch.local_x()), (*reference)(batch.local_x()), 1e-4, 1e-5);
}

// Captured bf16 steps: the only difference left is bf16 rounding of
// activations computed in batches of B instead of N * B and the order of
// the sums, so parameters agree to about bf16's resolution.
TEST_CASE("DDP: captured bf16 TrainSteps on N GPUs match one process with the global batch" *
          doctest::skip(!loom::testing::test_on_gpu())) {
  NumericsGuard bf16({.precision = Precision::Bf16});
  auto reference = make_net(0);
  auto replica = make_net(world()->rank() == 0 ? 0 : 50 + world()->rank());
  nn::DistributedDataParallel ddp(replica, world());
  optim::SGD opt_ref(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt(replica->parameters(), {.lr = 0.1, .momentum = 0.9});
  auto step_of = [](nn::Module& net) {
    return [&net](const Tensor& x, const Tensor& y) {
      AutocastGuard autocast(DType::BFloat16);
      return std::vector<Tensor>{cross_entropy(net(x), y)};
    };
  };
  optim::TrainStep ref_step(step_of(*reference), opt_ref);
  optim::TrainStep step(step_of(ddp), opt);
  for (int i = 0; i < 6; ++i) {
    GlobalBatch batch = global_batch(i);
    ref_step(batch.x, batch.y);
    step(batch.local_x(), batch.local_y());
  }
  CHECK(step.stats().replays >= 3);
  CHECK(ref_step.stats().replays >= 3);
  nn::NamedTensors expected = reference->named_parameters(), actual = replica->named_parameters();
  for (size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(expected[i].first);
    CHECK(loom::testing::normalized_error(actual[i].second, expected[i].second) < 2e-2);
  }
}
