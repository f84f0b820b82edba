// File: tests/models/zoo_gpu_test.cc
// Every zoo model trains on the GPU as the trainers run it (channels-last,
// nn::fuse, optim::TrainStep with CUDA graphs): a few Adam steps on one fixed
// batch, in tf32 and in bf16 autocast, must bring the loss down. Prints per
// model whether the steps were captured or why they ran eagerly, so the zoo's
// eager fallbacks (dropout) show. ImageNet-sized models run at batch 4 with
// Adam at lr 1e-4, the rest at 16 with lr 1e-3: at 1e-3 the ImageNet VGGs'
// first Adam steps from random weights drove their 1000-class loss up
// (23 -> 28 on an H200, tf32 and bf16).
// N batch, C channels, H, W.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "models/registry.h"
#include "optim/adam.h"
#include "optim/train_step.h"
#include "tests/testing.h"
#include "training/trainer.h"

using namespace loom;

namespace {

constexpr int kSteps = 12;

void check_loss_falls(const models::ZooModel& row, const std::string& precision) {
  CAPTURE(row.name);
  CAPTURE(precision);
  training::PrecisionScope scope(precision, testing::test_gpu(), /*autotune=*/false);
  manual_seed(0);
  std::shared_ptr<nn::Module> net = row.build(row.num_classes);
  net->to(testing::test_gpu());
  net->to(MemoryFormat::ChannelsLast);
  nn::fuse(*net);
  optim::Adam opt(net->parameters(), {.lr = row.dataset == "imagenet" ? 1e-4 : 1e-3});
  optim::TrainStep step([&](const Tensor& x, const Tensor& y) { return std::vector<Tensor>{cross_entropy((*net)(x), y)}; },
                        opt);
  Generator gen(1);
  const int64_t batch = row.dataset == "imagenet" ? 4 : 16;
  Tensor x = randn(row.batch_shape(batch), {}, &gen).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = randint(0, row.num_classes, row.target_shape(batch), {.dtype = DType::Int64}, &gen).to(testing::test_gpu());
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) losses.push_back(step(x, y)[0].item());
  for (double l : losses) REQUIRE(std::isfinite(l));
  const double first = (losses[0] + losses[1] + losses[2]) / 3;
  const double last = (losses[kSteps - 1] + losses[kSteps - 2] + losses[kSteps - 3]) / 3;
  std::printf("%-20s %-5s loss %.4f -> %.4f  %s\n", row.name.c_str(), precision.c_str(), first, last,
              step.last_step_replayed() ? "captured" : ("eager: " + step.fallback_reason()).c_str());
  CHECK(last < first);
}

}  // namespace

LOOM_GPU_TEST_CASE("every zoo model's loss falls in a few TrainSteps, tf32 and bf16") {
  for (const models::ZooModel& row : models::zoo()) {
    for (const char* precision : {"tf32", "bf16"}) check_loss_falls(row, precision);
  }
}
