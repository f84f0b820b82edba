// File: tests/examples/mnist/trainer_test.cc
// Short CPU trainings through the MNIST trainer on a subset of the real
// Fashion-MNIST (Debian's dataset-fashion-mnist, which tools/setup.sh installs):
// the loss falls and accuracy clears a bar; stopping after an epoch and resuming
// from the checkpoint gives bit-identical results to an uninterrupted run.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "training/trainer.h"
#include "tests/testing.h"

using namespace loom;

namespace {

bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(training::kFashionMnist) + "/train-images-idx3-ubyte.gz");
}

training::TrainConfig small(int epochs, int64_t images) {
  return {.epochs = epochs, .batch_size = 50, .device = Device::cpu(), .limit = images,
          .test_limit = 2000, .progress = false};
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + std::to_string(::getpid()))).string();
}

}  // namespace

TEST_CASE("a short CPU training on Fashion-MNIST lowers the loss and clears 75% accuracy" *
          doctest::skip(!have_fashion_mnist())) {
  training::TrainResult r = training::train(small(2, 4000));
  REQUIRE(r.epochs.size() == 2);
  CHECK(r.epochs[1].train_loss < r.epochs[0].train_loss);
  CHECK(r.epochs[1].test_accuracy > 0.75);
}

TEST_CASE("resuming from a checkpoint reproduces an uninterrupted run bit for bit" *
          doctest::skip(!have_fashion_mnist())) {
  training::TrainResult straight = training::train(small(2, 1000));

  std::string checkpoint = temp_path("loom_resume_");
  training::TrainConfig first = small(1, 1000);  // the first epoch alone, then a checkpoint
  first.save = checkpoint;
  training::train(first);
  training::TrainConfig second = small(2, 1000);
  second.resume = checkpoint;
  training::TrainResult resumed = training::train(second);
  std::filesystem::remove(checkpoint);

  REQUIRE(resumed.epochs.size() == 1);
  CHECK(resumed.epochs[0].train_loss == straight.epochs[1].train_loss);
  CHECK(resumed.epochs[0].test_accuracy == straight.epochs[1].test_accuracy);
  REQUIRE(resumed.model.size() == straight.model.size());
  for (size_t i = 0; i < straight.model.size(); ++i) {
    CAPTURE(straight.model[i].first);
    CHECK(resumed.model[i].first == straight.model[i].first);
    CHECK(testing::values(resumed.model[i].second) == testing::values(straight.model[i].second));
  }
}

TEST_CASE("a bad configuration is a clear error") {
  training::TrainConfig c = small(1, 100);
  c.model = "resnet50";
  c.data = "/nonexistent";
  CHECK_THROWS_AS(training::train(c), Error);
  c.data = training::kFashionMnist;
  if (have_fashion_mnist()) CHECK_THROWS_WITH_FRAGMENT(training::train(c), ValueError, "unknown model 'resnet50'");
}

namespace {

training::TrainConfig synthetic(int epochs) {
  return {.synthetic_images = 200, .epochs = epochs, .batch_size = 50, .device = Device::cpu(),
          .progress = false};
}

}  // namespace

TEST_CASE("a NaN loss stops training at its step with a hint, unless allowed; then it is skipped") {
  training::TrainConfig c = synthetic(2);
  c.lr = 1e30;  // the first update blows the weights up; the next loss is NaN
  c.optimizer = "sgd";
  CHECK_THROWS_WITH_FRAGMENT(training::train(c), NonFiniteError,
                             "the loss was not finite (NaN or inf) at step 2 of this run (epoch 1, "
                             "batch 2 of 4)");
  CHECK_THROWS_WITH_FRAGMENT(training::train(c), NonFiniteError, "--allow-nonfinite-loss");
  c.stop_on_nonfinite_loss = false;
  training::TrainResult r = training::train(c);
  REQUIRE(r.epochs.size() == 2);
  CHECK(r.epochs[0].skipped_steps >= 1);
}

TEST_CASE("an unwritable --save fails before training, not after the first epoch") {
  training::TrainConfig c = synthetic(1);
  c.save = "/nonexistent-folder/ck.ckpt";
  CHECK_THROWS_WITH_FRAGMENT(training::train(c), IoError,
                             "[train] --save /nonexistent-folder/ck.ckpt cannot be written (checked "
                             "before training)");
}

TEST_CASE("resuming with changed flags warns about each, saying the command line wins") {
  std::string checkpoint = temp_path("loom_flags_");
  training::TrainConfig first = synthetic(1);
  first.schedule = "onecycle";
  first.save = checkpoint;
  CHECK(training::train(first).warnings.empty());
  training::TrainConfig same = first;
  same.save.clear();
  same.resume = checkpoint;
  CHECK(training::train(same).warnings.empty());  // already done: nothing to warn about
  training::TrainConfig second = same;
  second.epochs = 2;
  second.lr = 0.01;
  training::TrainResult resumed = training::train(second);
  std::filesystem::remove(checkpoint);
  REQUIRE(resumed.warnings.size() == 2);
  CHECK(resumed.warnings[0].find("--epochs was '1' in the run that wrote " + checkpoint +
                                 " and is '2' now: the command line's value wins") !=
        std::string::npos);
  CHECK(resumed.warnings[1].find("--lr was '0.001'") != std::string::npos);
  CHECK(resumed.epochs.size() == 1);
}
