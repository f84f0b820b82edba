// File: tests/training/flags_test.cc
// The trainers' flag parser: whole tokens, range checks, known metrics
// formats, paths that are not empty and outputs that do not collide; and
// train_main's exit codes when training fails, out of memory included.
#include "training/flags.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/testing.h"

using namespace loom;
using training::parse_flags;

namespace {

training::TrainConfig parse(const std::vector<std::string>& args) {
  return parse_flags(args, {}).config;
}

}  // namespace

TEST_CASE("numeric flags take whole tokens in range") {
  CHECK(parse({"--epochs", "3"}).epochs == 3);
  CHECK(parse({"--seed", "18446744073709551615"}).seed == 18446744073709551615ull);
  CHECK(parse({"--lr", "1e-3"}).lr == 1e-3);
  CHECK(parse({"--limit", "500", "--synthetic", "64"}).limit == 500);
  CHECK(parse({"--label-smoothing", "0.1"}).label_smoothing == 0.1);

  CHECK_THROWS_WITH_FRAGMENT(parse({"--epochs", "1x"}), ValueError,
                             "--epochs needs a whole number from 1 to 1000000, got '1x'");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--epochs", "0"}), ValueError, "got '0'");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--epochs", "99999999999"}), ValueError, "--epochs");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--seed", "-1"}), ValueError, "--seed needs a whole number from 0 to 18446744073709551615, got '-1'");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--seed", "18446744073709551616"}), ValueError, "--seed");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--limit", "-1"}), ValueError, "--limit needs a whole number from 1");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--synthetic", "-5"}), ValueError, "--synthetic needs a whole number from 1");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--batch-size", " 8"}), ValueError, "got ' 8'");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--batch-size", "+8"}), ValueError, "got '+8'");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--lr", "inf"}), ValueError, "--lr needs a finite number");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--lr", "nan"}), ValueError, "--lr needs a finite number");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--lr", "0"}), ValueError, "--lr must be greater than 0");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--lr", "0.1.2"}), ValueError, "got '0.1.2'");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--weight-decay", "-0.1"}), ValueError, "--weight-decay");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--label-smoothing", "1"}), ValueError, "in [0, 1)");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--target-accuracy", "1.5"}), ValueError, "in [0, 1]");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--profile", "-2"}), ValueError, "--profile");
}

TEST_CASE("metrics files must be CSV or JSONL by name; unknown flags and missing values are errors") {
  CHECK(parse({"--metrics", "m.csv"}).metrics == "m.csv");
  CHECK(parse({"--metrics", "m.jsonl"}).metrics == "m.jsonl");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--metrics", "out.txt"}), ValueError,
                             "--metrics 'out.txt': the file name must end in .csv or .jsonl");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--epoch", "2"}), ValueError, "unknown argument '--epoch'");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--epochs"}), ValueError, "--epochs needs a value");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--device", "tpu"}), ValueError, "unknown device 'tpu'");
  training::TrainConfig c{.device = Device::cpu(), .metrics = "run.txt", .progress = false};
  CHECK_THROWS_WITH_FRAGMENT(training::train(c), ValueError, "must end in .csv or .jsonl");
}

TEST_CASE("switches: help stops parsing, the non-finite-loss opt-out, graphs off") {
  CHECK(parse_flags({"--help", "--epochs", "junk"}, {}).help);
  CHECK(parse({}).stop_on_nonfinite_loss);
  CHECK_FALSE(parse({"--allow-nonfinite-loss"}).stop_on_nonfinite_loss);
  CHECK_FALSE(parse({"--no-cuda-graph"}).cuda_graph);
}

TEST_CASE("train_main returns exit codes instead of dying: usage 2, failures 1, out of memory 1") {
  auto run = [](std::vector<std::string> args) {
    args.insert(args.begin(), "train");
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    return training::train_main(static_cast<int>(argv.size()), argv.data(), {.progress = false},
                                "usage\n");
  };
  CHECK(run({"--epochs", "1x"}) == 2);
  CHECK(run({"--help"}) == 0);
  CHECK(run({"--device", "cpu", "--data", "/nonexistent"}) == 1);
  // 2e9 images of 784 bytes: the old code staged them as doubles, threw
  // std::bad_alloc past train_main and aborted.
  CHECK(run({"--device", "cpu", "--synthetic", "2000000000"}) == 1);
}

TEST_CASE("--flag=value is --flag value, -h is --help; name checks need no data") {
  CHECK(parse({"--epochs=3", "--lr=0.5"}).epochs == 3);
  CHECK(parse({"--epochs=3", "--lr=0.5"}).lr == 0.5);
  CHECK(parse({"--metrics=m.csv"}).metrics == "m.csv");
  CHECK(parse_flags({"-h"}, {}).help);
  CHECK_THROWS_WITH_FRAGMENT(parse({"--epochs="}), ValueError, "got ''");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--no-fuse=1"}), ValueError, "--no-fuse takes no value");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--model", "vgg"}), ValueError,
                             "--model: unknown value 'vgg' (mnist takes lenet5, mnist_net, vit_tiny)");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--model", "resnet9"}), ValueError,
                             "--model resnet9 does not fit MNIST-format data: it takes (3, 32, 32) images (cifar10)");
  CHECK(parse({"--model", "vit_tiny"}).model == "vit_tiny");  // any zoo model of MNIST's size
  CHECK(training::models_for("cifar10").find("resnet20") != std::string::npos);
  CHECK_THROWS_WITH_FRAGMENT(parse({"--device", "cpu", "--precision", "bf16"}), ValueError,
                             "--precision bf16 needs a GPU");
  CHECK_THROWS_WITH_FRAGMENT(parse_flags({}, {.dataset = "cifar10", .data = "", .model = "resnet9"}),
                             ValueError, "no data: pass --data DIR");
}

TEST_CASE("--plot takes a .png; --detect-anomaly is a switch") {
  CHECK(parse({"--plot", "curves.png"}).plot == "curves.png");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--plot", "curves.pdf"}), ValueError,
                             "--plot 'curves.pdf': the picture is a PNG");
  CHECK(parse({"--detect-anomaly"}).detect_anomaly);
  CHECK_FALSE(parse({}).detect_anomaly);
  CHECK_THROWS_WITH_FRAGMENT(parse({"--detect-anomaly=1"}), ValueError, "takes no value");
}

TEST_CASE("--export-onnx takes a .onnx path; unset, nothing is exported") {
  CHECK(parse({"--export-onnx", "model.onnx"}).export_onnx == "model.onnx");
  CHECK(parse({"--export-onnx=out/m.onnx"}).export_onnx == "out/m.onnx");
  CHECK(parse({}).export_onnx.empty());
  CHECK_THROWS_WITH_FRAGMENT(parse({"--export-onnx="}), ValueError, "--export-onnx '': an ONNX model's file name");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--export-onnx", "--epochs", "3"}), ValueError,
                             "--export-onnx '--epochs': an ONNX model's file name ends in .onnx");
}

TEST_CASE("relative paths resolve against the user's directory (bazel run's BUILD_WORKING_DIRECTORY)") {
  training::TrainConfig c = parse({"--data", "fashion", "--save", "out/ck", "--resume", "/abs/ck",
                                   "--metrics", "m.csv", "--plot", "p.png", "--export-onnx", "m.onnx"});
  training::resolve_user_paths(c, "/home/user/work");
  CHECK(c.data == "/home/user/work/fashion");
  CHECK(c.save == "/home/user/work/out/ck");
  CHECK(c.resume == "/abs/ck");  // absolute paths stay
  CHECK(c.metrics == "/home/user/work/m.csv");
  CHECK(c.plot == "/home/user/work/p.png");
  CHECK(c.export_onnx == "/home/user/work/m.onnx");

  training::TrainConfig unset = parse({"--metrics", "m.csv"});
  training::resolve_user_paths(unset, nullptr);  // not under bazel run
  CHECK(unset.metrics == "m.csv");
  CHECK(unset.save.empty());  // an unset path stays unset
  training::resolve_user_paths(unset, "/w");
  CHECK(unset.save.empty());
}

TEST_CASE("an empty path is a usage error, not a silently absent flag") {
  for (const char* flag : {"--save", "--resume", "--data"}) {
    INFO(flag);
    CHECK_THROWS_WITH_FRAGMENT(parse({flag, ""}), ValueError, std::string(flag) + " needs a path, got ''");
    CHECK_THROWS_WITH_FRAGMENT(parse({std::string(flag) + "="}), ValueError, "needs a path");
  }
  CHECK_THROWS_WITH_FRAGMENT(parse({"--metrics", ""}), ValueError, "must end in .csv or .jsonl");
  CHECK_THROWS_WITH_FRAGMENT(parse({"--plot", ""}), ValueError, "the picture is a PNG");
}

TEST_CASE("two outputs naming one file, or an output naming the resumed checkpoint, are refused") {
  auto paths = [](const std::vector<std::string>& args) {
    training::TrainConfig c = parse(args);
    training::resolve_user_paths(c, "/home/user/run");
    training::check_paths(c);
  };
  CHECK_THROWS_WITH_FRAGMENT(paths({"--save", "m.csv", "--metrics", "m.csv"}), ValueError,
                             "--save and --metrics both name /home/user/run/m.csv: each output "
                             "needs a file of its own");
  CHECK_THROWS_WITH_FRAGMENT(paths({"--save", "./out/../m.csv", "--metrics", "/home/user/run/m.csv"}),
                             ValueError, "--save and --metrics both name");
  CHECK_THROWS_WITH_FRAGMENT(paths({"--save", "c.png", "--plot", "c.png"}), ValueError,
                             "--save and --plot both name");
  CHECK_THROWS_WITH_FRAGMENT(paths({"--resume", "r.csv", "--metrics", "r.csv"}), ValueError,
                             "--metrics names the checkpoint --resume reads (/home/user/run/r.csv)");
  CHECK_THROWS_WITH_FRAGMENT(paths({"--save", "m.onnx", "--export-onnx", "m.onnx"}), ValueError,
                             "--save and --export-onnx both name");
  CHECK_THROWS_WITH_FRAGMENT(paths({"--resume", "r.onnx", "--export-onnx", "r.onnx"}), ValueError,
                             "--export-onnx names the checkpoint --resume reads");
  CHECK_NOTHROW(paths({"--resume", "ck", "--save", "ck", "--metrics", "m.csv", "--plot", "m.png", "--export-onnx",
                       "m.onnx"}));
  CHECK_NOTHROW(paths({}));
  // A symbolic link to the metrics file is the metrics file.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("loom_flags_paths_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "m.csv") << "run_id\n";
  std::filesystem::create_symlink(dir / "m.csv", dir / "link.csv");
  CHECK_THROWS_WITH_FRAGMENT(paths({"--save", (dir / "link.csv").string(), "--metrics", (dir / "m.csv").string()}),
                             ValueError, "--save and --metrics both name");
  std::filesystem::remove_all(dir);
}
