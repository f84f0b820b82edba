// File: tests/data/dataloader_gpu_test.cc
// DataLoader to a GPU: the pinned-staging host mode (with and without workers)
// and the GPU-resident mode (device gather, crop, flip and normalize) deliver
// the CPU loader's batches bit for bit, over several epochs, a partial last
// batch, gray and RGB sets.
// N samples, B batch, C channels, H, W image size
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <vector>

#include "data/dataloader.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

struct Epoch {
  std::vector<Batch> batches;  // copied back to the CPU
};

Epoch run_epoch(DataLoader& loader, bool expect_cuda) {
  Epoch epoch;
  for (auto& [x, y] : loader) {
    CHECK(x.device().is_cuda() == expect_cuda);
    CHECK(y.device().is_cuda() == expect_cuda);
    epoch.batches.push_back({x.cpu(), y.cpu()});
  }
  return epoch;
}

void check_same_epoch(const Epoch& actual, const Epoch& expected) {
  REQUIRE(actual.batches.size() == expected.batches.size());
  for (size_t k = 0; k < actual.batches.size(); ++k) {
    CAPTURE(k);
    CHECK_CLOSE(actual.batches[k].x, expected.batches[k].x, 0, 0);
    CHECK(actual.batches[k].y.to_vector<int64_t>() == expected.batches[k].y.to_vector<int64_t>());
  }
}

struct Case {
  int64_t n, c, h, w, batch;
  std::vector<double> mean, stddev;
  Augment augment;
};

const Case kCases[] = {
    {1000, 1, 28, 28, 128, {0.2860}, {0.3530}, {}},                           // MNIST-like
    {301, 3, 32, 32, 64, {0.49, 0.48, 0.45}, {0.25, 0.24, 0.26}, {4, true}},  // CIFAR-like
    {17, 3, 5, 7, 4, {}, {}, {2, true}},                                      // odd sizes
};

DataLoaderOptions options_for(const Case& c, Device device, int workers) {
  return {.batch_size = c.batch,
          .shuffle = true,
          .num_workers = workers,
          .seed = 99,
          .device = device,
          .mean = c.mean,
          .stddev = c.stddev,
          .augment = c.augment};
}

LOOM_GPU_TEST_CASE("staged and resident GPU loaders match the CPU loader bit for bit") {
  for (const Case& c : kCases) {
    CAPTURE(c.n);
    const Dataset data = testing::random_dataset(c.n, c.c, c.h, c.w, 10, 17);
    DataLoader cpu(data, options_for(c, Device::cpu(), 0));
    DataLoader staged(data, options_for(c, loom::testing::test_gpu(), 0));
    DataLoader staged_threads(data, options_for(c, loom::testing::test_gpu(), 3));
    DataLoader resident = DataLoader::resident(data, options_for(c, loom::testing::test_gpu(), 0));
    CHECK(resident.is_resident());
    for (int epoch = 0; epoch < 2; ++epoch) {
      const Epoch expected = run_epoch(cpu, false);
      check_same_epoch(run_epoch(staged, true), expected);
      check_same_epoch(run_epoch(staged_threads, true), expected);
      check_same_epoch(run_epoch(resident, true), expected);
    }
  }
}

LOOM_GPU_TEST_CASE("pinned slots are not refilled before their copies finish") {
  // Many small batches and a one-slot-per-worker queue: a slot whose copy were
  // still in flight when refilled would corrupt an earlier batch. Batches stay
  // on the device until the end, so nothing synchronizes in between.
  const Dataset data = testing::random_dataset(4096, 3, 32, 32, 10, 23);
  DataLoaderOptions options{.batch_size = 32,
                            .shuffle = true,
                            .num_workers = 2,
                            .prefetch_per_worker = 1,
                            .device = loom::testing::test_gpu()};
  DataLoader staged(data, options);
  std::vector<Batch> kept;
  for (auto& batch : staged) kept.push_back(batch);
  options.device = Device::cpu();
  DataLoader cpu(data, options);
  size_t k = 0;
  for (auto& [x, y] : cpu) {
    CHECK_CLOSE(kept[k].x.cpu(), x, 0, 0);
    CHECK(kept[k].y.to_vector<int64_t>() == y.to_vector<int64_t>());
    ++k;
  }
  CHECK(k == kept.size());
}

LOOM_GPU_TEST_CASE("set_epoch replays a resident epoch") {
  const Dataset data = testing::random_dataset(100, 1, 28, 28, 10, 29);
  DataLoader a = DataLoader::resident(data, {.batch_size = 32,
                                             .shuffle = true,
                                             .device = loom::testing::test_gpu(),
                                             .augment = {.padding = 2, .flip = true}});
  run_epoch(a, true);
  const Epoch second = run_epoch(a, true);
  DataLoader b = DataLoader::resident(data, a.options());
  b.set_epoch(1);
  check_same_epoch(run_epoch(b, true), second);
}

}  // namespace
}  // namespace loom::data
#endif  // LOOM_WITH_CUDA
