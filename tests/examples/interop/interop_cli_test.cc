// File: tests/examples/interop/interop_cli_test.cc
// The interop programs' command lines: -h, usage errors exit 2 with the usage,
// failures exit 1 with one message (no abort), and relative paths are the
// user's directory under `bazel run`.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/examples/program_run.h"

namespace {

using Run = loom::testing::ProgramRun;
using loom::testing::has;

Run roundtrip(const std::string& args, const std::string& environment = "") {
  return loom::testing::run_program("examples/interop/safetensors_roundtrip", args, environment);
}
Run logits(const std::string& args) {
  return loom::testing::run_program("examples/interop/model_logits", args);
}

}  // namespace

TEST_CASE("-h prints the usage and exits 0") {
  for (Run r : {roundtrip("-h"), roundtrip("--help"), logits("-h"), logits("--help")}) {
    CHECK(r.code == 0);
    CHECK(has(r, "usage: "));
  }
}

TEST_CASE("usage errors exit 2 and say what is wrong") {
  Run none = roundtrip("");
  CHECK(none.code == 2);
  CHECK(has(none, "expected write PATH"));
  Run seed = roundtrip("write /tmp/x.safetensors --seed abc");
  CHECK(seed.code == 2);
  CHECK(has(seed, "--seed needs a whole number from 0 to 2^64-1, got 'abc'"));
  Run extra = roundtrip("read a.safetensors b");
  CHECK(extra.code == 2);
  CHECK(has(extra, "unexpected argument 'b'"));
  Run command = logits("train mnist_net /tmp");
  CHECK(command.code == 2);
  CHECK(has(command, "unknown command 'train' (export or eval)"));
  CHECK(logits("export").code == 2);
}

TEST_CASE("failures exit 1 with one message, never an abort") {
  Run missing = roundtrip("read /nonexistent-loom/x.safetensors");
  CHECK(missing.code == 1);
  CHECK(has(missing, "safetensors_roundtrip: "));
  Run model = logits("export vgg19 /tmp");
  CHECK(model.code == 1);
  CHECK(has(model, "unknown model 'vgg19' (the zoo has lenet5"));
  Run no_files = logits("eval mnist_net /nonexistent-loom");
  CHECK(no_files.code == 1);
  CHECK(has(no_files, "model_logits: "));
}

TEST_CASE("a relative path is the user's directory under bazel run") {
  const std::filesystem::path user =
      std::filesystem::temp_directory_path() / ("loom_interop_user_" + std::to_string(::getpid()));
  std::filesystem::create_directories(user);
  Run r = roundtrip("write t.safetensors --seed 3", "BUILD_WORKING_DIRECTORY=" + user.string());
  CHECK(r.code == 0);
  CHECK(has(r, "tensor\t"));
  CHECK(std::filesystem::exists(user / "t.safetensors"));
  std::filesystem::remove_all(user);
}
