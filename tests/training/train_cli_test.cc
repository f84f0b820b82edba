// File: tests/training/train_cli_test.cc
// The trainers' command line as a user meets it: examples/mnist:train and
// examples/cifar:train are run and their exit codes and output checked. Usage
// errors (exit 2) are found before any data is loaded; the header says what
// runs; a resume with nothing left to do says so; --explain and the plan
// timeline on the CPU say in one line that there are no cuDNN plans, and the
// timeline lists the start-up's phases.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/checkpoint.h"
#include "core/device.h"
#include "core/tensor.h"
#include "tests/examples/program_run.h"

namespace {

using Run = loom::testing::ProgramRun;
using loom::testing::has;

Run mnist(const std::string& args, const std::string& environment = "") {
  return loom::testing::run_program("examples/mnist/train", args, environment);
}
Run cifar(const std::string& args) { return loom::testing::run_program("examples/cifar/train", args); }

// A folder that does not exist: were the data loaded first, the run would
// exit 1 on it instead of reporting the usage error.
constexpr const char* kNoData = "--data /nonexistent-loom-data";

}  // namespace

TEST_CASE("-h is --help for both trainers") {
  for (Run r : {mnist("-h"), cifar("-h"), mnist("--help")}) {
    CHECK(r.code == 0);
    CHECK(has(r, "--epochs N"));
  }
  // The models --model takes come from the zoo's registry, those of the trainer's image size.
  CHECK(has(mnist("--help"), "Models for --model (models/registry.h): lenet5, mnist_net, vit_tiny\n"));
  CHECK(has(cifar("--help"), "Models for --model (models/registry.h): resnet9, resnet18_cifar,"));
}

TEST_CASE("every usage error exits 2 with one line naming the flag") {
  Run zero = mnist("--epochs 0");
  CHECK(zero.code == 2);
  CHECK(has(zero, "train: --epochs needs a whole number from 1 to 1000000, got '0'"));
  CHECK(zero.output.find('\n') == zero.output.size() - 1);  // one line
  Run abc = mnist("--epochs abc");
  CHECK(abc.code == 2);
  CHECK(has(abc, "got 'abc'"));
  CHECK(mnist("--epochs=abc").code == 2);
  CHECK(cifar("--epochs 0").code == 2);
  Run optimizer = mnist(std::string("--optimizer lion ") + kNoData);
  CHECK(optimizer.code == 2);
  CHECK(has(optimizer, "--optimizer: unknown value 'lion' (adagrad, adam, adamw, rmsprop, sgd)"));
  CHECK(mnist(std::string("--schedule linear ") + kNoData).code == 2);
  CHECK(mnist(std::string("--precision fp16 ") + kNoData).code == 2);
  Run switch_value = mnist("--explain=1");
  CHECK(switch_value.code == 2);
  CHECK(has(switch_value, "--explain takes no value"));
}

TEST_CASE("trainer path conflicts and empty paths are usage errors (exit 2), before any data") {
  Run same = mnist(std::string("--save m.csv --metrics m.csv ") + kNoData);
  CHECK(same.code == 2);
  CHECK(has(same, "train: --save and --metrics both name"));
  CHECK(same.output.find('\n') == same.output.size() - 1);  // one line
  for (const char* args : {"--save ''", "--resume ''", "--resume="}) {
    INFO(args);
    Run empty = mnist(std::string(args) + " " + kNoData);
    CHECK(empty.code == 2);
    CHECK(has(empty, "needs a path, got ''"));
  }
}

TEST_CASE("a failure that is not a usage error exits 1") {
  Run missing = mnist(std::string("--device cpu ") + kNoData);
  CHECK(missing.code == 1);
}

TEST_CASE("--device cuda without a GPU names the flags to use, before loading data" *
          doctest::skip(loom::cuda_available())) {
  Run r = mnist(std::string("--device cuda ") + kNoData);
  CHECK(r.code == 2);
  CHECK(has(r, "no usable GPU: use --device cpu or --device auto"));
  CHECK(cifar("--device=cuda --synthetic 64").code == 2);
}

TEST_CASE("a model that does not fit the dataset is a usage error before loading data") {
  Run r = mnist(std::string("--model resnet9 --device cpu ") + kNoData);
  CHECK(r.code == 2);
  CHECK(has(r, "--model resnet9 does not fit MNIST-format data"));
  Run c = cifar("--model lenet5 --synthetic 64 --device cpu");
  CHECK(c.code == 2);
  CHECK(has(c, "--model lenet5 does not fit CIFAR-10"));
}

TEST_CASE("cifar/train without --data names --data, --synthetic and the CIFAR-10 binary format") {
  Run r = cifar("--device cpu");
  CHECK(r.code == 2);
  CHECK(has(r, "--data DIR"));
  CHECK(has(r, "--synthetic N"));
  CHECK(has(r, "data_batch_1.bin"));
  CHECK(has(r, "cifar-10-binary.tar.gz"));
}

TEST_CASE("--precision bf16 on the CPU is refused: the CPU computes in fp32") {
  Run r = mnist(std::string("--device cpu --precision bf16 ") + kNoData);
  CHECK(r.code == 2);
  CHECK(has(r, "--precision bf16 needs a GPU: the CPU computes in fp32"));
}

TEST_CASE("the header shows fp32 on the CPU and, after --resume, the lr the checkpoint carries; "
          "a resume with nothing left says so") {
  const std::string checkpoint =
      (std::filesystem::temp_directory_path() / ("loom_cli_" + std::to_string(::getpid()) + ".ckpt")).string();
  const std::string small = "--device=cpu --synthetic=64 --batch-size=32 ";
  Run first = mnist(small + "--epochs=1 --save=" + checkpoint);
  REQUIRE(first.code == 0);
  CHECK(has(first, "adam lr 0.001, schedule none, fp32 (the CPU has no tf32)"));

  Run strict = mnist(small + "--epochs 1 --precision strict");
  CHECK(strict.code == 0);
  CHECK(has(strict, "schedule none, fp32\n"));

  Run resumed = mnist(small + "--epochs 2 --lr 10 --resume " + checkpoint);
  CHECK(resumed.code == 0);
  CHECK(has(resumed, "adam lr 0.001,"));
  CHECK_FALSE(has(resumed, "adam lr 10"));
  CHECK(has(resumed, "training goes on with the checkpoint's value '0.001'"));
  CHECK(has(resumed, "epoch 2:"));

  Run done = mnist(small + "--epochs 1 --resume " + checkpoint);
  CHECK(done.code == 0);
  CHECK(has(done, "nothing to do: checkpoint is at epoch 1, --epochs 1"));
  CHECK_FALSE(has(done, "epoch 1:"));

  // A CRC-valid checkpoint whose optimizer step is 1e30 fails on load, naming
  // the file, not later as a non-finite loss; its flags are quoted printably.
  loom::TrainingCheckpoint ckpt = loom::load_checkpoint(checkpoint);
  for (auto& [name, value] : ckpt.optimizer) {
    if (name == "state.0.step") value = loom::full({}, 1e30);
  }
  ckpt.extra["flag.--seed"] = "7\x1b[2J";
  loom::save_checkpoint(checkpoint, ckpt);
  Run corrupt = mnist(small + "--epochs 2 --resume " + checkpoint);
  CHECK(corrupt.code == 1);
  CHECK(has(corrupt, "train: [train] --resume " + checkpoint + ": the checkpoint does not fit this "
                     "run: [Adam load_state_dict] state.0.step holds 1.0000000150474662e+30"));
  CHECK(has(corrupt, "--seed was '7\\x1B[2J' in the run that wrote"));
  CHECK_FALSE(has(corrupt, "not finite"));
  std::filesystem::remove(checkpoint);
}

TEST_CASE("--explain and LOOM_CUDNN_PLAN_TIMELINE on the CPU say in one line that there are no cuDNN plans") {
  const std::filesystem::path timeline =
      std::filesystem::temp_directory_path() / ("loom_cli_timeline_" + std::to_string(::getpid()) + ".txt");
  Run r = mnist("--device=cpu --synthetic=64 --batch-size=32 --epochs=1 --explain",
                "LOOM_CUDNN_PLAN_TIMELINE=" + timeline.string());
  CHECK(r.code == 0);
  CHECK(has(r, "no cuDNN plans: "));
  std::ifstream in(timeline);
  REQUIRE(in.is_open());
  std::string first_line;
  std::getline(in, first_line);
  CHECK(first_line == "no cuDNN plans: the run was on the CPU");
  // The start-up's phases follow the plans, in the order the trainer marks them.
  std::string phases;
  std::getline(in, phases);
  CHECK(phases.starts_with("start-up (s since start): model on device "));
  for (const char* phase : {", train split read ", ", test split read ", ", data in hand ",
                            ", loaders ready ", ", optimizer and step ready ", ", first step queued "}) {
    CAPTURE(phase);
    CHECK(phases.find(phase) != std::string::npos);
  }
  CHECK(has(r, "start-up (s since start): model on device "));
  std::filesystem::remove(timeline);
}
