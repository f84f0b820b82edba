// File: tests/bench/summary_test.cc
// Medians of repeats and the JSON lines bench/compare.py reads.
#include "bench/summary.h"

#include <doctest/doctest.h>

#include <limits>

#include "tests/testing.h"

namespace loom::bench {
namespace {

TEST_CASE("median: odd and even counts, any order") {
  CHECK(median({3.0}) == 3.0);
  CHECK(median({5.0, 1.0, 4.0}) == 4.0);
  CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
  CHECK(median({0.9, 100.0, 1.1, 1.0, 0.8}) == 1.0);  // one outlier does not move it
  CHECK_THROWS_WITH_FRAGMENT(median({}), ValueError, "median of no values");
}

TEST_CASE("a step result: median ms, images per second and every JSON field") {
  StepResult r{.model = "lenet5",
               .precision = "tf32",
               .mode = "graph",
               .layout = "nchw",
               .device = "cuda:0",
               .batch = 128,
               .steps = 100,
               .repeats = 3,
               .warmup = 10,
               .repeat_ms = {0.5, 0.25, 0.3},
               .first_step_s = 1.5,
               .model_ready_s = 0.5,
               .inputs_ready_s = 0.75,
               .peak_bytes = 3 * 1024 * 1024,
               .steady_peak_bytes = 2 * 1024 * 1024,
               .fallback_reason = "an op read a \"value\" back"};
  CHECK(r.ms_per_step() == 0.3);
  CHECK(r.images_per_second() == doctest::Approx(128 / 0.3e-3));
  const std::string json = to_json(r);
  for (const char* field :
       {"\"framework\": \"loom\"", "\"kind\": \"step\"", "\"model\": \"lenet5\"", "\"batch\": 128",
        "\"precision\": \"tf32\"", "\"mode\": \"graph\"", "\"layout\": \"nchw\"",
        "\"device\": \"cuda:0\"", "\"steps\": 100", "\"repeats\": 3", "\"warmup\": 10",
        "\"ms_per_step\": 0.3", "\"first_step_s\": 1.5", "\"model_ready_s\": 0.5",
        "\"inputs_ready_s\": 0.75", "\"peak_bytes\": 3145728",
        "\"peak_mib\": 3", "\"steady_peak_bytes\": 2097152", "\"steady_peak_mib\": 2",
        "\"repeat_ms\": [0.5, 0.25, 0.3]",
        "\"fallback_reason\": \"an op read a \\\"value\\\" back\""}) {
    CHECK_MESSAGE(json.find(field) != std::string::npos, json, "\nmissing: ", field);
  }
  CHECK(json.front() == '{');
  CHECK(json.back() == '}');
  CHECK(json.find('\n') == std::string::npos);  // one line per configuration
}

TEST_CASE("a time-to-accuracy result as JSON") {
  const TtaResult r{.target = 0.91,
                    .reached = true,
                    .epochs = 2,
                    .seconds = 4.5,
                    .wall_seconds = 5.25,
                    .accuracies = {0.89, 0.915}};
  const std::string json = to_json(r);
  for (const char* field : {"\"kind\": \"tta\"", "\"target\": 0.91", "\"reached\": true",
                            "\"epochs\": 2", "\"seconds\": 4.5", "\"wall_seconds\": 5.25",
                            "\"accuracy\": 0.915", "\"accuracies\": [0.89, 0.915]"}) {
    CHECK_MESSAGE(json.find(field) != std::string::npos, json, "\nmissing: ", field);
  }
}

TEST_CASE("a non-finite measurement is written as null, which JSON readers accept") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const TtaResult r{.target = 0.91, .seconds = nan, .accuracies = {0.5, nan}};
  const std::string json = to_json(r);
  for (const char* field : {"\"seconds\": null", "\"accuracy\": null", "\"accuracies\": [0.5, null]"}) {
    CHECK_MESSAGE(json.find(field) != std::string::npos, json, "\nmissing: ", field);
  }
  CHECK(json.find("nan") == std::string::npos);
}

}  // namespace
}  // namespace loom::bench
