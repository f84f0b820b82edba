// File: tests/bench/step_bench_test.cc
// The benchmark binary's main on the CPU: one tiny configuration end to end,
// its JSON line, and bad flags.
#include "bench/step_bench.h"
#include "bench/stopwatch.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/testing.h"

namespace loom::bench {
namespace {

int run_main(std::vector<std::string> args) {
  args.insert(args.begin(), "bench_train_step");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return bench_main(static_cast<int>(argv.size()), argv.data());
}

// The number after "key": in a JSON line, or -1 when the key is missing.
double json_number(const std::string& line, const std::string& key) {
  std::smatch m;
  const std::regex pattern("\"" + key + "\": ([-0-9.e+]+)");
  return std::regex_search(line, m, pattern) ? std::stod(m[1]) : -1;
}

TEST_CASE("one CPU configuration for 2 steps writes a JSON line with positive timings") {
  const std::string path =
      (std::filesystem::temp_directory_path() / "loom_step_bench_test.jsonl").string();
  std::filesystem::remove(path);
  const int rc = run_main({"--device", "cpu", "--models", "lenet5", "--batches", "8",
                           "--precisions", "tf32", "--modes", "eager", "--steps", "2", "--repeats",
                           "1", "--warmup", "1", "--json", path});
  REQUIRE(rc == 0);
  std::ifstream in(path);
  std::string line, extra;
  REQUIRE(std::getline(in, line));
  CHECK_FALSE(std::getline(in, extra));  // one configuration, one line
  INFO(line);
  CHECK(line.find("\"model\": \"lenet5\"") != std::string::npos);
  CHECK(line.find("\"mode\": \"eager\"") != std::string::npos);
  CHECK(line.find("\"device\": \"cpu\"") != std::string::npos);
  CHECK(json_number(line, "batch") == 8);
  CHECK(json_number(line, "ms_per_step") > 0);
  CHECK(json_number(line, "img_per_s") > 0);
  CHECK(json_number(line, "first_step_s") > 0);
  CHECK(json_number(line, "peak_bytes") == 0);  // no GPU memory on the CPU
  CHECK(json_number(line, "steady_peak_bytes") == 0);
  CHECK(line.find("\"plans_settled\": true") != std::string::npos);  // nothing to settle on the CPU
  CHECK(json_number(line, "img_per_s") ==
        doctest::Approx(8e3 / json_number(line, "ms_per_step")).epsilon(1e-6));
  std::filesystem::remove(path);
}

TEST_CASE("settle_plans waits for no plans on the CPU, so its work never runs again") {
  int runs = 0;
  CHECK(settle_plans(Device::cpu(), [&runs] { ++runs; }));
  CHECK(runs == 0);
}

TEST_CASE("bad flags exit 2; --help exits 0") {
  CHECK(run_main({"--models", "vgg"}) == 2);
  CHECK(run_main({"--steps", "0"}) == 2);
  CHECK(run_main({"--help"}) == 0);
}

}  // namespace
}  // namespace loom::bench
