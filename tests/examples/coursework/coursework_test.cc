// File: tests/examples/coursework/coursework_test.cc
// The coursework example of docs/writing_a_module.md: it trains on generated
// data and learns it, its command line follows the examples' conventions, and
// every block the tutorial quotes is the example's code, character for
// character.
#include <doctest/doctest.h>

#include <regex>
#include <string>

#include "tests/examples/program_run.h"
#include "tests/examples/snippets.h"

namespace {

using Run = loom::testing::ProgramRun;
using loom::testing::doc_snippets;
using loom::testing::read_text;
using loom::testing::source_snippets;
using loom::testing::has;

Run coursework(const std::string& args) {
  return loom::testing::run_program("examples/coursework/coursework", args);
}

}  // namespace

TEST_CASE("coursework: the tutorial quotes the example's code exactly") {
  const auto source = source_snippets(read_text("examples/coursework/coursework.cc"));
  const auto doc = doc_snippets(read_text("docs/writing_a_module.md"));
  CHECK(source.size() == 5);
  CHECK(doc.size() == source.size());
  for (const auto& [name, code] : source) {
    CAPTURE(name);
    REQUIRE(doc.contains(name));
    CHECK(doc.at(name) == code);
  }
}

TEST_CASE("coursework: trains on generated data and learns it") {
  Run run = coursework("--synthetic 640 --epochs 2 --device cpu");
  CHECK(run.code == 0);
  CHECK(
      has(run, "Net(\n  (conv1): Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))"));
  CHECK(has(run, "epoch 1: train loss"));
  const std::smatch last = [&] {
    std::smatch m;
    REQUIRE(std::regex_search(
        run.output, m, std::regex(R"(epoch 2: train loss [0-9.]+, test accuracy ([0-9.]+))")));
    return m;
  }();
  CHECK(std::stod(last[1]) >= 0.9);
}

TEST_CASE("coursework: usage errors are one line and exit 2; --help exits 0") {
  Run none = coursework("");
  CHECK(none.code == 2);
  CHECK(has(none, "coursework: give exactly one of --data DIR"));
  Run epochs = coursework("--synthetic 10 --epochs 0");
  CHECK(epochs.code == 2);
  CHECK(has(epochs, "--epochs needs a whole number from 1 to 1000, got '0'"));
  CHECK(coursework("--synthetic=10 --device tpu").code == 2);
  CHECK(coursework("--synthetic 10 --bogus 1").code == 2);
  Run help = coursework("-h");
  CHECK(help.code == 0);
  CHECK(has(help, "usage: coursework"));
}

TEST_CASE("coursework: a missing data folder is a failure (exit 1) naming the file") {
  Run run = coursework("--data /nonexistent/fashion-mnist --epochs 1 --device cpu");
  CHECK(run.code == 1);
  CHECK(has(run, "/nonexistent/fashion-mnist"));
}
