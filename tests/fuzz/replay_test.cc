// File: tests/fuzz/replay_test.cc
// Replays a fuzz target's seed corpus and regression inputs through its
// harness (LOOM_FUZZ_TARGET names it; tools/fuzzing.bzl builds one test per
// target): what once crashed must now be rejected cleanly, under any compiler
// and, in CI, under ASan/UBSan.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> inputs_in(const fs::path& folder) {
  std::vector<fs::path> files;
  if (!fs::is_directory(folder)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("every seed and regression input of the " LOOM_FUZZ_TARGET " fuzz target runs cleanly") {
  const std::vector<fs::path> seeds = inputs_in(fs::path("fuzz/corpus") / LOOM_FUZZ_TARGET);
  const std::vector<fs::path> regressions = inputs_in(fs::path("fuzz/regressions") / LOOM_FUZZ_TARGET);
  REQUIRE_MESSAGE(!seeds.empty(), "no seed corpus in fuzz/corpus/" LOOM_FUZZ_TARGET
                                  " (tools/fuzz_corpus.sh writes it)");
  for (const std::vector<fs::path>* set : {&seeds, &regressions}) {
    for (const fs::path& file : *set) {
      CAPTURE(file.string());
      std::ifstream in(file, std::ios::binary);
      const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
      CHECK(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()) == 0);
    }
  }
  MESSAGE(seeds.size(), " seeds, ", regressions.size(), " regression inputs");
}
