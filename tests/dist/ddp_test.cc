// nn::DistributedDataParallel over MPI between the ranks of `mpirun.sh N`
// (N >= 2): N ranks with B samples each train like one process with the
// global batch of N * B. On the CPU by default; with LOOM_DIST_TEST_DEVICE=cuda
// each rank trains on its GPU over NCCL (strict fp32, so that the only
// difference left is the order of the sums).
#include "dist/ddp.h"

#include <doctest/doctest.h>

#include "core/numerics.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/sgd.h"
#include "tests/dist/world.h"
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

TEST_CASE("DDP: replicas whose models differ are refused at construction") {
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
