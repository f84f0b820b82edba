// File: tests/data/dataloader_test.cc
// DataLoader on the CPU: each epoch covers the set exactly once, drop_last,
// seeds and epochs decide the order, worker threads change nothing, batches are
// normalized and augmented as a naive computation here says, and bad options
// are errors. Labels are sample indices, so y tells which samples a batch holds.
// N samples, B batch, C channels, H, W image size
#include "data/dataloader.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "data/sampler.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

// Random pixels; label i = i, so batches say which samples they hold.
Dataset indexed_dataset(int64_t n, int64_t c, int64_t h, int64_t w) {
  Dataset data = testing::random_dataset(n, c, h, w, 10, /*seed=*/11);
  data.labels = arange(n, {.dtype = DType::Int64});
  return data;
}

struct Epoch {
  std::vector<Tensor> x;
  std::vector<int64_t> y;  // all labels, in delivery order
  std::vector<int64_t> batch_sizes;
};

Epoch run_epoch(DataLoader& loader) {
  Epoch epoch;
  for (auto& [x, y] : loader) {
    epoch.x.push_back(x);
    const std::vector<int64_t> labels = y.to_vector<int64_t>();
    epoch.y.insert(epoch.y.end(), labels.begin(), labels.end());
    epoch.batch_sizes.push_back(y.size(0));
  }
  return epoch;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

void check_same_epoch(const Epoch& a, const Epoch& b) {
  REQUIRE(a.x.size() == b.x.size());
  CHECK(a.y == b.y);
  for (size_t k = 0; k < a.x.size(); ++k) CHECK_CLOSE(a.x[k], b.x[k], 0, 0);
}

TEST_CASE("a shuffled epoch covers every sample exactly once") {
  const Dataset data = indexed_dataset(103, 1, 3, 3);
  DataLoader loader(data, {.batch_size = 10, .shuffle = true});
  CHECK(loader.size() == 11);
  const Epoch epoch = run_epoch(loader);
  CHECK(epoch.batch_sizes == std::vector<int64_t>{10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 3});
  std::vector<int64_t> sorted = epoch.y;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == iota(103));
  CHECK(epoch.y != iota(103));
  CHECK(epoch.x[0].sizes() == Shape{10, 1, 3, 3});
  CHECK(epoch.x[0].dtype() == DType::Float32);
}

TEST_CASE("without shuffle the order is the set's") {
  DataLoader loader(indexed_dataset(7, 1, 2, 2), {.batch_size = 3});
  CHECK(run_epoch(loader).y == iota(7));
  CHECK(run_epoch(loader).y == iota(7));
}

TEST_CASE("drop_last skips the short batch") {
  const Dataset data = indexed_dataset(103, 1, 2, 2);
  DataLoader loader(data, {.batch_size = 10, .shuffle = true, .drop_last = true});
  CHECK(loader.size() == 10);
  const Epoch epoch = run_epoch(loader);
  CHECK(epoch.batch_sizes == std::vector<int64_t>(10, 10));
  std::vector<int64_t> sorted = epoch.y;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // no repeats

  DataLoader too_big(data, {.batch_size = 200, .drop_last = true});
  CHECK(too_big.size() == 0);
  CHECK(run_epoch(too_big).y.empty());
  DataLoader one(data, {.batch_size = 200});
  CHECK(run_epoch(one).batch_sizes == std::vector<int64_t>{103});
}

TEST_CASE("the seed and the epoch decide the order; set_epoch replays an epoch") {
  const Dataset data = indexed_dataset(64, 1, 2, 2);
  const DataLoaderOptions options{.batch_size = 8, .shuffle = true, .seed = 5};
  DataLoader a(data, options), b(data, options);
  DataLoaderOptions other_seed = options;
  other_seed.seed = 6;
  DataLoader c(data, other_seed);
  std::vector<std::vector<int64_t>> orders;
  for (int e = 0; e < 3; ++e) {
    CHECK(a.epoch() == e);
    orders.push_back(run_epoch(a).y);
    CHECK(run_epoch(b).y == orders.back());
  }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[1] != orders[2]);
  CHECK(run_epoch(c).y != orders[0]);
  DataLoader resumed(data, options);
  resumed.set_epoch(1);
  CHECK(run_epoch(resumed).y == orders[1]);
  CHECK(resumed.epoch() == 2);
  CHECK(run_epoch(resumed).y == orders[2]);
}

TEST_CASE("worker threads deliver exactly what the iterating thread builds") {
  const Dataset data = indexed_dataset(203, 3, 6, 5);
  DataLoaderOptions options{.batch_size = 16,
                            .shuffle = true,
                            .seed = 21,
                            .mean = {0.5, 0.4, 0.3},
                            .stddev = {0.2, 0.25, 0.3},
                            .augment = {.padding = 2, .flip = true}};
  DataLoader single(data, options);
  const Epoch e0 = run_epoch(single), e1 = run_epoch(single);
  for (int workers : {1, 2, 3}) {
    for (int prefetch : {1, 3}) {
      CAPTURE(workers);
      CAPTURE(prefetch);
      options.num_workers = workers;
      options.prefetch_per_worker = prefetch;
      DataLoader threaded(data, options);
      check_same_epoch(run_epoch(threaded), e0);
      check_same_epoch(run_epoch(threaded), e1);
    }
  }
}

TEST_CASE("batches are the normalized, placed images of the epoch plan") {
  const Dataset data = indexed_dataset(37, 2, 4, 4);
  const std::vector<double> mean = {0.3, 0.6}, stddev = {0.5, 0.2};
  const Augment augment{.padding = 1, .flip = true};
  DataLoader loader(data, {.batch_size = 9,
                           .shuffle = true,
                           .seed = 8,
                           .mean = mean,
                           .stddev = stddev,
                           .augment = augment});
  loader.set_epoch(4);
  const Epoch epoch = run_epoch(loader);
  const EpochPlan plan = plan_epoch(37, true, augment, 8, 4);
  CHECK(epoch.y == plan.order);
  const std::vector<uint8_t> pixels = data.images.to_vector<uint8_t>();
  for (int64_t i = 0; i < 37; ++i) {
    const Tensor x = epoch.x[i / 9].select(0, i % 9);
    const Placement p = plan.placements[i];
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 4; ++w) {
          const int64_t sh = p.top + h - 1, sw = p.left + (p.flip ? 3 - w : w) - 1;
          const bool inside = sh >= 0 && sh < 4 && sw >= 0 && sw < 4;
          const double pixel = inside ? pixels[((plan.order[i] * 2 + c) * 4 + sh) * 4 + sw] : 0;
          CHECK(x.at({c, h, w}) ==
                doctest::Approx((pixel / 255 - mean[c]) / stddev[c]).epsilon(1e-6));
        }
  }
}

TEST_CASE("leaving a threaded epoch early stops its workers") {
  const Dataset data = indexed_dataset(500, 1, 4, 4);
  DataLoader loader(data, {.batch_size = 4, .shuffle = true, .num_workers = 3});
  int seen = 0;
  for (auto& [x, y] : loader) {
    CHECK(x.size(0) == 4);
    if (++seen == 2) break;
  }
  CHECK(run_epoch(loader).y.size() == 500);
}

TEST_CASE("resident() on the CPU is the host loader") {
  const Dataset data = indexed_dataset(30, 1, 2, 2);
  const DataLoaderOptions options{.batch_size = 7, .shuffle = true, .augment = {.padding = 1}};
  DataLoader resident = DataLoader::resident(data, options);
  DataLoader host(data, options);
  CHECK_FALSE(resident.is_resident());
  check_same_epoch(run_epoch(resident), run_epoch(host));
}

TEST_CASE("bad options and data sets are errors") {
  const Dataset data = indexed_dataset(10, 3, 2, 2);
  CHECK_THROWS_WITH_FRAGMENT(DataLoader(data, {.batch_size = 0}), ValueError,
                             "[DataLoader] batch_size must be >= 1, got 0");
  CHECK_THROWS_WITH_FRAGMENT(DataLoader(data, {.num_workers = -1}), ValueError,
                             "num_workers must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(DataLoader(data, {.prefetch_per_worker = 0}), ValueError,
                             "prefetch_per_worker must be >= 1, got 0");
  CHECK_THROWS_WITH_FRAGMENT(DataLoader(data, {.augment = {.padding = -2}}), ValueError,
                             "augment.padding must be >= 0, got -2");
  CHECK_THROWS_WITH_FRAGMENT(DataLoader(data, {.mean = {0.1, 0.2}}), ValueError,
                             "mean has 2 values for 3 channels");
  CHECK_THROWS_WITH_FRAGMENT(DataLoader({data.images.to(DType::Float32), data.labels}, {}),
                             TypeError, "[DataLoader] images must be uint8");
  CHECK_THROWS_WITH_FRAGMENT(DataLoader(data, {}).set_epoch(-1), ValueError,
                             "epoch must be >= 0, got -1");
  if (!cuda_available()) {
    CHECK_THROWS_WITH_FRAGMENT(DataLoader(data, {.device = loom::testing::test_gpu()}), DeviceError,
                               "[DataLoader] options.device is cuda:0 but");
  }
}

}  // namespace
}  // namespace loom::data
