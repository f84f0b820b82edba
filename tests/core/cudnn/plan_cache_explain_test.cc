// File: tests/core/cudnn/plan_cache_explain_test.cc
// PlanCache::explain() where no cuDNN plan exists: a CUDA build on a machine
// without a GPU (CI), or a process whose ops all ran elsewhere. --explain and
// bench's --plan-timeline print it, so it must answer in one clear line and
// never throw. It runs on every machine (not a GPU test): without a GPU it is
// the case the trainers meet on a CPU-only machine.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <string>

#include "core/cudnn/plan_cache.h"
#include "core/device.h"

using namespace loom;

TEST_CASE("explain() with no cuDNN plans is one line saying why, and does not throw") {
  cudnn::PlanCache& cache = cudnn::PlanCache::global();
  cache.clear();
  std::string text;
  REQUIRE_NOTHROW(text = cache.explain());
  CAPTURE(text);
  CHECK(text.starts_with("no cuDNN plans: "));
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  if (!cuda_available()) CHECK(text.find("every op ran on the CPU") != std::string::npos);
}

TEST_CASE("the plan timeline with no cuDNN plans does not throw") {
  cudnn::PlanCache& cache = cudnn::PlanCache::global();
  cache.clear();
  std::string table;
  REQUIRE_NOTHROW(table = cache.timeline_table());
  CHECK(cache.timeline().empty());
  CHECK(table.starts_with("cuDNN plan timeline"));
}
#endif  // LOOM_WITH_CUDA
