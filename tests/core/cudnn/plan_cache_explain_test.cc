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
#include "core/cudnn/plan_log.h"
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
TEST_CASE("the plan table names each plan's engine and knobs, and why a graph has no plan") {
  cudnn::PlanInfo built{.graph = "conv_dgrad nhwc f32", .workspace_bytes = 4096, .hits = 3};
  built.notes = {.engine_id = 62, .numerical = {"TENSOR_CORE"}, .knobs = {"SWIZZLE=1", "TILE_SIZE=7"}};
  cudnn::PlanInfo plain = built;
  plain.graph = "conv_fprop nhwc f32";
  plain.notes.knobs.clear();
  const cudnn::PlanInfo refused{.graph = "pool nchw f32", .supported = false, .why_unsupported = "no engine"};
  const std::string text = cudnn::explain_table({built, plain, refused}, {});
  CAPTURE(text);
  const auto line_of = [&text](const std::string& graph) {
    const size_t at = text.find(graph);
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  const std::string dgrad = line_of("conv_dgrad"), fprop = line_of("conv_fprop");
  CHECK(dgrad.find(" 62 ") != std::string::npos);
  CHECK(dgrad.ends_with("TENSOR_CORE [SWIZZLE=1 TILE_SIZE=7]"));
  CHECK(fprop.ends_with("TENSOR_CORE"));  // no knobs, no brackets
  CHECK(line_of("pool nchw").find("unsupported: no engine") != std::string::npos);
}
#endif  // LOOM_WITH_CUDA
