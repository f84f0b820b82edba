// File: tests/training/trainer_gpu_test.cc
// The trainer's GPU paths: the epoch tally in device buffers gives what the
// CPU's gives; a graphed epoch reports means over every image; and
// --detect-anomaly (eager steps, device checks) names the layer.
// B batch, K = 3 classes.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "training/epoch_tally.h"
#include "training/trainer.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// Logits (B, 3) whose argmax is each of `classes`, on `device`.
Tensor logits_for(const std::vector<int64_t>& classes, Device device) {
  Tensor logits = zeros({static_cast<int64_t>(classes.size()), 3});
  for (size_t i = 0; i < classes.size(); ++i) {
    logits.narrow(0, static_cast<int64_t>(i), 1).narrow(1, classes[i], 1).fill_(1.0);
  }
  return logits.to(device);
}

Tensor labels(const std::vector<double>& values, Device device) {
  return tensor(values, {static_cast<int64_t>(values.size())}, {.dtype = DType::Int64}).to(device);
}

training::TrainConfig gpu_run() {
  return {.synthetic_images = 256, .epochs = 1, .batch_size = 64, .device = testing::test_gpu(),
          .progress = false};
}

}  // namespace

LOOM_GPU_TEST_CASE("the epoch tally in GPU buffers gives the CPU's means") {
  for (Device device : {Device::cpu(), testing::test_gpu()}) {
    training::EpochTally tally(2, 4, device);
    tally.add(full({}, 2.0).to(device), logits_for({0, 1, 2, 0}, device), labels({0, 1, 1, 1}, device));
    tally.read();
    tally.add(full({}, 1.0).to(device), logits_for({2, 2}, device), labels({2, 2}, device));
    tally.read();
    CHECK(tally.mean_loss() == doctest::Approx((2.0 * 4 + 1.0 * 2) / 6));
    CHECK(tally.accuracy() == doctest::Approx(4.0 / 6));
  }
}

LOOM_GPU_TEST_CASE("a graphed GPU epoch reports its accuracy over every image") {
  training::TrainResult r = training::train(gpu_run());
  REQUIRE(r.epochs.size() == 1);
  const double correct = r.epochs[0].train_accuracy * 256;
  CHECK(std::abs(correct - std::round(correct)) < 1e-9);
  CHECK(std::isfinite(r.epochs[0].train_loss));
  CHECK(std::isfinite(r.epochs[0].test_loss));
}

LOOM_GPU_TEST_CASE("--detect-anomaly on the GPU names the first layer whose weights overflowed") {
  training::TrainConfig c = gpu_run();
  c.lr = 1e38;
  c.detect_anomaly = true;
  CHECK_THROWS_WITH_FRAGMENT(training::train(c), NonFiniteError, "in 0 (");
  CHECK_THROWS_WITH_FRAGMENT(training::train(c), NonFiniteError, "[anomaly] the forward of '");
}
