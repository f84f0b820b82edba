// File: tests/docs/tutorials_test.cc
// Each tutorial's program (examples/tutorials), run as docs/ tells the reader
// to run it, on the CPU: it exits 0 and prints what the tutorial says it prints.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/examples/program_run.h"

namespace {

using Run = loom::testing::ProgramRun;
using loom::testing::has;

Run tutorial(const std::string& name, const std::string& args = "") {
  return loom::testing::run_program("examples/tutorials/" + name, args);
}

// A fresh folder under the test's scratch space.
std::string scratch(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(tmp ? tmp : "/tmp") / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("quick_start trains the quadrant classifier to full accuracy") {
  Run run = tutorial("quick_start");
  INFO(run.output);
  CHECK(run.code == 0);
  CHECK(has(run, "w.grad() has shape (3, 2)"));
  CHECK(has(run, "step 100 loss 0.0"));
  CHECK(has(run, "after training: accuracy 1.00"));
}

TEST_CASE("datasets writes and reads IDX and CIFAR files, an image folder, and batches them") {
  Run run = tutorial("datasets", scratch("datasets") + " tests/docs/testdata/shapes");
  INFO(run.output);
  CHECK(run.code == 0);
  CHECK(has(run, "mnist: 100 images of 1 x 28 x 28"));
  CHECK(has(run, "cifar10: 20 images of 3 x 32 x 32"));
  CHECK(has(run, "image folder: 4 images of 3 x 8 x 8\n  class 0: circle\n  class 1: square"));
  CHECK(has(run, "batch x (32, 1, 28, 28) y (32)"));
  CHECK(has(run, "batch x (4, 1, 28, 28) y (4)"));
  CHECK(has(run, "one epoch: 4 batches, 100 samples"));

  Run usage = tutorial("datasets");
  CHECK(usage.code == 2);
  CHECK(has(usage, "usage: datasets SCRATCH_DIR [IMAGE_FOLDER]"));
}

TEST_CASE("gpu_and_precision: both layouts and the strict policy give the same gradient on the CPU; --explain works without a GPU") {
  Run run = tutorial("gpu_and_precision", "--explain");
  INFO(run.output);
  CHECK(run.code == 0);
  if (has(run, "device cpu")) {  // a GPU host prints its own differences (tf32 is not exact)
    CHECK(has(run, "channels-last vs NCHW gradient: max difference 0.00e+00"));
    CHECK(has(run, "under strict_fp32: max difference to the default 0.00e+00"));
    CHECK(has(run, "--explain: no cuDNN plans, nothing ran on a GPU"));
  }
  CHECK(has(run, "default policy tf32"));
}

TEST_CASE("checkpoints_and_interop: the safetensors round trip and the resumed run are exact") {
  Run run = tutorial("checkpoints_and_interop", scratch("checkpoints"));
  INFO(run.output);
  CHECK(run.code == 0);
  CHECK(has(run, "0.weight (8, 4)\n0.bias (8,)\n2.weight (3, 8)\n2.bias (3,)"));
  CHECK(has(run, "safetensors round trip: identical"));
  CHECK(has(run, "resumed at step 3: identical to the uninterrupted run"));
}

TEST_CASE("onnx: the trained model exports, passes the ONNX checker, and runs in ONNX Runtime where installed") {
  const std::string dir = scratch("onnx");
  Run run = tutorial("onnx", dir);
  INFO(run.output);
  CHECK(run.code == 0);
  CHECK(has(run, "net.onnx: 8 nodes, 8 initializers, input 'image', output 'logits'"));
  CHECK(has(run, "net_folded.onnx: 7 nodes"));
  CHECK(has(run, "refused: [onnx] op 'dropout' (#6 of the trace): dropout in training mode"));
  CHECK(has(run, "export in evaluation mode (module.eval())"));
  CHECK_FALSE(std::filesystem::exists(dir + "/noisy.onnx"));

  // Debian's python3-onnx: the full check, and the symbolic batch.
  const std::string check = "-c \"import onnx,sys\nfor f in sys.argv[1:]:\n m=onnx.load(f); "
                            "onnx.checker.check_model(m, full_check=True); "
                            "print([d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim])\" ";
  Run checked = loom::testing::run_program("/usr/bin/python3", check + dir + "/net.onnx " + dir + "/net_folded.onnx");
  CHECK_MESSAGE(checked.code == 0, checked.output);
  CHECK(checked.output == "['batch', 1, 28, 28]\n['batch', 1, 28, 28]\n");

  // The tutorial's Python side: ONNX Runtime against Loom's logits (exit 3 where it is not installed).
  Run ort = loom::testing::run_program("/usr/bin/python3", "examples/tutorials/onnx_runtime.py " + dir);
  INFO(ort.output);
  if (ort.code == 3) {
    CHECK(has(ort, "onnx_runtime: onnxruntime is not installed"));
  } else {
    CHECK(ort.code == 0);
    CHECK(has(ort, "inputs: [('image', ['batch', 1, 28, 28])]"));
    CHECK(has(ort, "max |onnxruntime - loom|: "));
    const double diff = std::stod(ort.output.substr(ort.output.find("loom|: ") + 7));
    CHECK(diff < 1e-4);
    CHECK(has(ort, "batch of 1: (1, 10) same row: True"));
  }
}
