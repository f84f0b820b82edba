// File: tests/examples/cifar/trainer_test.cc
// The CIFAR trainer's configuration (resnet9, crop + flip, SGD Nesterov,
// one-cycle, label smoothing) runs end to end on a tiny generated CIFAR-10
// fixture in the binary format, and on synthetic data.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "core/generator.h"
#include "data/cifar.h"
#include "training/trainer.h"
#include "tests/testing.h"

using namespace loom;

namespace {

training::TrainConfig cifar_config() {
  return {.dataset = "cifar10", .model = "resnet9", .epochs = 1, .batch_size = 16,
          .optimizer = "sgd", .lr = 0.05, .weight_decay = 5e-4, .label_smoothing = 0.2,
          .crop_padding = 4, .flip = true, .schedule = "onecycle", .device = Device::cpu(),
          .progress = false};
}

// A folder with data_batch_1..5.bin and test_batch.bin of a few random images each.
std::string write_fixture(int64_t per_batch) {
  std::string dir = (std::filesystem::temp_directory_path() / ("loom_cifar_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  Generator gen(3);
  auto make = [&](int64_t n) {
    return data::Dataset{randint(0, 256, {n, 3, 32, 32}, {.dtype = DType::UInt8}, &gen),
                         randint(0, 10, {n}, {.dtype = DType::Int64}, &gen)};
  };
  data::save_cifar10(dir, data::Split::Train, make(5 * per_batch));
  data::save_cifar10(dir, data::Split::Test, make(per_batch));
  return dir;
}

}  // namespace

TEST_CASE("resnet9 trains one epoch on a CIFAR-10-format fixture") {
  std::string dir = write_fixture(8);
  training::TrainConfig c = cifar_config();
  c.data = dir;
  training::TrainResult r = training::train(c);
  std::filesystem::remove_all(dir);
  REQUIRE(r.epochs.size() == 1);
  CHECK(std::isfinite(r.epochs[0].train_loss));
  CHECK(r.epochs[0].test_accuracy >= 0.0);
  CHECK(r.epochs[0].test_accuracy <= 1.0);
  // 8 conv + BN blocks (a weight and 5 BN entries each) and the final linear layer.
  CHECK(r.model.size() == 8 * 6 + 2);
}

TEST_CASE("--synthetic runs the same model on generated data") {
  training::TrainConfig c = cifar_config();
  c.synthetic_images = 32;
  training::TrainResult r = training::train(c);
  REQUIRE(r.epochs.size() == 1);
  CHECK(std::isfinite(r.epochs[0].train_loss));
}

TEST_CASE("the trainer takes any zoo model of CIFAR's size: resnet20 (custom modules, option-A shortcuts)") {
  training::TrainConfig c = cifar_config();
  c.model = "resnet20";
  c.synthetic_images = 32;
  training::TrainResult r = training::train(c);
  REQUIRE(r.epochs.size() == 1);
  CHECK(std::isfinite(r.epochs[0].train_loss));
  CHECK(r.model.front().first == "conv1.weight");  // the registry's model, with akamaster's names
  CHECK(r.model.back().first == "linear.bias");
}

TEST_CASE("a zoo model of another size is refused with the models that fit") {
  training::TrainConfig c = cifar_config();
  c.synthetic_images = 32;
  c.model = "resnet18";
  CHECK_THROWS_WITH_FRAGMENT(training::train(c), ValueError, "[train] model resnet18 trains on imagenet data, not cifar10");
}

TEST_CASE("a folder without CIFAR batches is an I/O error naming the file") {
  training::TrainConfig c = cifar_config();
  c.data = "/nonexistent-cifar";
  CHECK_THROWS_WITH_FRAGMENT(training::train(c), IoError, "/nonexistent-cifar");
}
