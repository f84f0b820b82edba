// File: tests/core/cudnn/plan_store_gpu_test.cc
// The plan files: a plan built once is saved; after the in-memory cache is
// cleared it is restored from its file (same engine, same results) instead of
// built; a damaged file, or a FIFO in its place, is ignored and replaced; lazy
// mode builds again, timed, a key whose file holds an eager mode's untimed plan.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/cudnn/plan_cache.h"
#include "core/cudnn/plan_store.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// N batch, C channels, H, W; K out channels, R, S filter.
struct Conv {
  Tensor x, w;
  Tensor run() const { return conv2d(x, w, Tensor(), {.padding = {1, 1}}); }
};

Conv make_conv() {
  Generator gen(5);
  return {randn({4, 8, 12, 12}, {}, &gen).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast),
          randn({16, 8, 3, 3}, {}, &gen).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast)};
}

std::vector<std::filesystem::path> plan_files(const std::string& folder) {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::exists(folder)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) files.push_back(entry.path());
  return files;
}

// The "timed 0|1" line of a plan file ("" when it has none).
std::string timed_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("timed ", 0) == 0) return line;
  }
  return "";
}

}  // namespace

LOOM_GPU_TEST_CASE("a plan is saved, restored instead of rebuilt, and a damaged file is replaced") {
  // Before anything reads the setting (this binary's first use of the store).
  const std::string root = std::filesystem::temp_directory_path() / ("loom-plans-" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  setenv("LOOM_CUDNN_PLAN_DIR", root.c_str(), 1);
  auto& cache = cudnn::PlanCache::global();
  const auto& store = cudnn::PlanStore::global();
  REQUIRE(store.enabled());
  cache.clear();
  Conv conv = make_conv();

  // clear() also zeroes the counters.
  Tensor built = conv.run().cpu();
  const cudnn::PlanCacheStats s1 = cache.stats();
  CHECK(s1.plans_built == 1);
  CHECK(s1.plans_restored == 0);
  std::vector<std::filesystem::path> files = plan_files(store.directory());
  REQUIRE(files.size() == 1);
  const int64_t engine = cache.entries().front().notes.engine_id;

  cache.clear();
  Tensor restored = conv.run().cpu();
  const cudnn::PlanCacheStats s2 = cache.stats();
  CHECK(s2.plans_built == 0);
  CHECK(s2.plans_restored == 1);
  CHECK(cache.entries().front().restored);
  CHECK(cache.entries().front().notes.engine_id == engine);
  CHECK_CLOSE(restored, built, 0, 0);

  // A version-2 file, otherwise whole, may hold an untimed engine: it is rebuilt.
  {
    std::ifstream saved(files.front());
    std::string first_line;
    std::getline(saved, first_line);
    std::stringstream rest;
    rest << saved.rdbuf();
    saved.close();
    std::ofstream(files.front(), std::ios::trunc) << "loom-cudnn-plan 2\n" << rest.str();
  }
  cache.clear();
  Tensor rebuilt = conv.run().cpu();
  const cudnn::PlanCacheStats s3 = cache.stats();
  CHECK(s3.plans_built == 1);
  CHECK(s3.plans_restored == 0);
  CHECK_CLOSE(rebuilt, built, 0, 0);
  std::ifstream replaced(files.front());
  std::string magic, key;
  std::getline(replaced, magic);
  std::getline(replaced, key);
  CHECK(magic == "loom-cudnn-plan 3");
  CHECK(key.size() > 20);

  // A FIFO in the plan file's place is not opened for reading (that blocked
  // until a writer came): the plan is rebuilt, and saved over the FIFO.
  std::filesystem::remove(files.front());
  REQUIRE(::mkfifo(files.front().c_str(), 0600) == 0);
  cache.clear();
  Tensor after_fifo = conv.run().cpu();
  CHECK(cache.stats().plans_built == 1);
  CHECK_CLOSE(after_fifo, built, 0, 0);
  CHECK(std::filesystem::is_regular_file(files.front()));
  CHECK(timed_line(files.front()) == "timed 0");  // eager mode took the first engine that works

  // Lazy mode's builds time their candidates: it builds the eager plan's key
  // again instead of restoring it, and saves its timed choice over the file.
  {
    PlanBuildGuard lazy(PlanBuildMode::Lazy);
    cache.clear();
    (void)conv.run();
    cache.wait_for_background_builds();
    CHECK(cache.stats().plans_restored == 0);
  }
  CHECK(timed_line(files.front()) == "timed 1");
  cache.clear();
  Tensor from_timed = conv.run().cpu();
  CHECK(cache.stats().plans_restored == 1);  // eager mode restores a timed plan
  CHECK_CLOSE(from_timed, built, 1e-2, 1e-2);
  std::filesystem::remove_all(root);
}

#endif  // LOOM_WITH_CUDA
