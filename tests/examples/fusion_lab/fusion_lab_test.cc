// File: tests/examples/fusion_lab/fusion_lab_test.cc
// The fusion tutorial's program runs and prints what docs/fusion.md says it
// prints; every block the tutorial quotes is the program's code, character for
// character; the lab's command line, and its answer on a machine without a GPU.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "core/device.h"
#include "tests/examples/program_run.h"

namespace {

using Run = loom::testing::ProgramRun;
using loom::testing::has;

std::string read(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// name -> the lines between "// [snippet: name]" and "// [end snippet]", unindented by 2.
std::map<std::string, std::string> source_snippets(const std::string& source) {
  std::map<std::string, std::string> out;
  const std::regex block(R"(  // \[snippet: ([a-z]+)\]\n([\s\S]*?)  // \[end snippet\]\n)");
  for (std::sregex_iterator it(source.begin(), source.end(), block), end; it != end; ++it) {
    std::string code = (*it)[2];
    out[(*it)[1]] = std::regex_replace(code, std::regex(R"((^|\n)  )"), "$1");
  }
  return out;
}

// name -> the ```cpp block that follows "<!-- snippet: name -->".
std::map<std::string, std::string> doc_snippets(const std::string& doc) {
  std::map<std::string, std::string> out;
  const std::regex block(R"(<!-- snippet: ([a-z]+) -->\n```cpp\n([\s\S]*?)```\n)");
  for (std::sregex_iterator it(doc.begin(), doc.end(), block), end; it != end; ++it) {
    out[(*it)[1]] = (*it)[2];
  }
  return out;
}

}  // namespace

TEST_CASE("docs/fusion.md quotes first_block.cc exactly") {
  const auto source = source_snippets(read("examples/fusion_lab/first_block.cc"));
  const auto doc = doc_snippets(read("docs/fusion.md"));
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
  if (loom::cuda_available()) return;  // the GPU run is the coordinator's (see docs/fusion.md)
  Run run = loom::testing::run_program("examples/fusion_lab/fusion_lab", "--patterns");
  CHECK(run.code == 1);
  CHECK(has(run, "fusion_lab: no usable CUDA GPU here"));
}
