// File: tests/examples/fusion_lab/fusion_lab_test.cc
// The fusion tutorial's program runs and prints what docs/fusion.md says it
// prints; every block the tutorial quotes is the program's code, character for
// character; the lab's command line, and its answer on a machine without a GPU.
#include <doctest/doctest.h>

#include <string>

#include "core/device.h"
#include "tests/examples/program_run.h"
#include "tests/examples/snippets.h"

namespace {

using Run = loom::testing::ProgramRun;
using loom::testing::doc_snippets;
using loom::testing::read_text;
using loom::testing::source_snippets;
using loom::testing::has;

}  // namespace

TEST_CASE("docs/fusion.md quotes first_block.cc exactly") {
  const auto source = source_snippets(read_text("examples/fusion_lab/first_block.cc"), 2);
  const auto doc = doc_snippets(read_text("docs/fusion.md"));
  CHECK(source.size() == 6);
  CHECK(doc.size() == source.size());
  for (const auto& [name, code] : source) {
    CAPTURE(name);
    REQUIRE(doc.contains(name));
    CHECK(doc.at(name) == code);
  }
}

TEST_CASE("first_block declares, runs, checks and reports as the tutorial shows") {
  Run run = loom::testing::run_program("examples/fusion_lab/first_block", "");
  INFO(run.output);
  CHECK(run.code == 0);
  CHECK(has(run, "block: conv2d(stride=1, padding=1) -> bias -> gelu\noperands: weight, bias\n"
                 "pieces on a GPU: [conv2d(stride=1, padding=1) -> bias -> gelu]"));
  CHECK(has(run, "y (8, 16, 16, 16), w.grad() (16, 3, 3, 3)"));
  CHECK(has(run, "chain: conv2d(stride=1, padding=1) -> scale_bias -> gelu -> add_residual -> (8, 16, 16, 16)"));
  CHECK(has(run, "FusedConv2d runs conv2d(stride=1, padding=1) -> bias -> batch_norm -> relu"));
  CHECK(has(run, "logits (4, 10)"));
  if (has(run, "device cpu")) {  // a GPU prints its own rounding differences and a full report
    CHECK(has(run, "fused vs one by one: output 0.0e+00, weight gradient 0.0e+00"));
    CHECK(has(run, "fusion report: no fused blocks ran on a GPU"));
  }
}

TEST_CASE("fusion_lab: usage errors exit 2; without a GPU it says so and exits 1") {
  CHECK(loom::testing::run_program("examples/fusion_lab/fusion_lab", "--bogus").code == 2);
  CHECK(loom::testing::run_program("examples/fusion_lab/fusion_lab", "--iterations 0").code == 2);
  CHECK(loom::testing::run_program("examples/fusion_lab/fusion_lab", "--iterations 5x").code == 2);
  CHECK(loom::testing::run_program("examples/fusion_lab/fusion_lab", "--iterations abc").code == 2);
  Run unknown = loom::testing::run_program("examples/fusion_lab/fusion_lab", "--models resnet19");
  CHECK(unknown.code == 2);
  CHECK(unknown.output.find("unknown model 'resnet19' (the zoo has lenet5") != std::string::npos);
  if (loom::cuda_available()) return;  // the GPU run is the coordinator's (see docs/fusion.md)
  Run run = loom::testing::run_program("examples/fusion_lab/fusion_lab", "--patterns");
  CHECK(run.code == 1);
  CHECK(has(run, "fusion_lab: no usable CUDA GPU here"));
}
