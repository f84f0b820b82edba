// File: tests/distributed/nccl_gpu_test.cc
// One NCCL rank on one GPU, made from a unique id (no mpirun needed): the
// collectives, DistributedDataParallel inside a captured TrainStep under bf16
// autocast, and the setup deadline when a peer never shows up. Skipped where
// no GPU is usable.
#include <doctest/doctest.h>

#include <chrono>

#include "core/autocast.h"
#include "core/ops/ops.h"
#include "distributed/ddp.h"
#include "distributed/process_group.h"
#include "layers/nn.h"
#include "optim/sgd.h"
#include "optim/train_step.h"
#include "tests/testing.h"

using namespace loom;

namespace {

std::shared_ptr<distributed::ProcessGroup> single_rank() {
  static std::shared_ptr<distributed::ProcessGroup> group =
      distributed::ProcessGroup::from_unique_id(0, 1, distributed::UniqueId::create(), {.timeout_seconds = 60, .device = Device::cuda(0)});
  return group;
}

const Device kGpu = Device::cuda(0);

// N batch, C channels: conv + batch norm + linear, so bf16 autocast has work.
std::shared_ptr<nn::Sequential> make_net() {
  manual_seed(5);
  auto net = std::make_shared<nn::Sequential>(
      nn::Conv2d(3, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
      nn::Flatten(), nn::Linear(8 * 4 * 4, 10));
  net->to(kGpu);
  net->to(MemoryFormat::ChannelsLast);
  return net;
}

}  // namespace

LOOM_GPU_TEST_CASE("NCCL single rank: the collectives, and the unique id's hex form") {
  distributed::ProcessGroup& g = *single_rank();
  CHECK(g.rank() == 0);
  CHECK(g.size() == 1);
  CHECK(g.has_nccl());
  CHECK_FALSE(g.has_mpi());
  Tensor x = arange(6, {.device = kGpu}).view({2, 3});
  g.all_reduce(x);
  CHECK_CLOSE(x, arange(6).view({2, 3}), 0, 0);
  Tensor h = arange(8, {.dtype = DType::BFloat16, .device = kGpu});
  g.all_reduce(h, distributed::ReduceOp::Avg);
  CHECK_CLOSE(h, arange(8, {.dtype = DType::BFloat16}), 0, 0);
  Tensor view = arange(12, {.device = kGpu}).view({3, 4}).t();
  g.broadcast(view, 0);
  CHECK_CLOSE(view, arange(12).view({3, 4}).t(), 0, 0);
  Tensor gathered = empty({2, 3}, {.device = kGpu});
  g.all_gather(gathered, full({2, 3}, 4, {.device = kGpu}));
  CHECK_CLOSE(gathered, full({2, 3}, 4), 0, 0);
  Tensor scattered = empty({4}, {.device = kGpu});
  g.reduce_scatter(scattered, arange(4, {.device = kGpu}));
  CHECK_CLOSE(scattered, arange(4), 0, 0);
  g.barrier();
  CHECK_THROWS_WITH_FRAGMENT(g.all_reduce(zeros({2})), DeviceError, "CPU tensors go over MPI");
  distributed::UniqueId id = distributed::UniqueId::create();
  CHECK(distributed::UniqueId::from_hex(id.hex()).bytes == id.bytes);
}

LOOM_GPU_TEST_CASE("NCCL single rank: DDP in a captured bf16 TrainStep matches the plain model") {
  AutocastGuard autocast(DType::BFloat16);
  auto plain = make_net();
  auto replica = make_net();
  nn::DistributedDataParallel ddp(replica, single_rank(), {.bucket_cap_mb = 0.002});
  CHECK(ddp.bucket_layout().size() >= 2);  // several buckets: the side stream forks and joins
  optim::SGD opt_plain(plain->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt(replica->parameters(), {.lr = 0.05, .momentum = 0.9});
  auto loss_of = [](nn::Module& net) {
    return [&net](const Tensor& x, const Tensor& y) {
      return std::vector<Tensor>{cross_entropy(net(x), y)};
    };
  };
  optim::TrainStep step_plain(loss_of(*plain), opt_plain);
  optim::TrainStep step(loss_of(ddp), opt);
  Generator gen(9);
  for (int i = 0; i < 6; ++i) {
    Tensor x = randn({16, 3, 8, 8}, {}, &gen).to(kGpu).contiguous(MemoryFormat::ChannelsLast);
    Tensor y = randint(0, 10, {16}, {.dtype = DType::Int64}, &gen).to(kGpu);
    const double expected = step_plain(x, y)[0].item();
    const double actual = step(x, y)[0].item();
    CHECK(actual == doctest::Approx(expected).epsilon(1e-3));
  }
  INFO("fallback: " << step.fallback_reason());
  CHECK(step.stats().replays >= 4);  // NCCL and the side stream were captured
  nn::NamedTensors expected = plain->named_parameters(), actual = replica->named_parameters();
  for (size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(expected[i].first);
    // One rank averages over itself: the same kernels on the same inputs.
    CHECK_CLOSE(actual[i].second, expected[i].second, 1e-5, 1e-6);
  }
}

LOOM_GPU_TEST_CASE("NCCL: a peer that never joins fails the setup after the timeout, not a hang") {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_FRAGMENT(
      distributed::ProcessGroup::from_unique_id(0, 2, distributed::UniqueId::create(), {.timeout_seconds = 3, .device = Device::cuda(0)}),
      DistError, "rank 0 of 2 waited 3 s for the other ranks");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 30);
}
