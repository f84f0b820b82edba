// File: tests/core/cuda/kernel_choice_gpu_test.cc
// KernelChoice's bookkeeping (never its timings, which a test cannot assert):
// a race runs each candidate once to warm up and kTimedRuns times, only at a
// key's first meeting; a candidate that cannot run is never chosen; an
// environment variable forces a name without running anything, and an unknown
// name is refused with the choices; no race runs inside a CUDA-graph capture;
// forget_kernel_choices() makes a key race again at its next meeting outside one.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdlib>
#include <string>

#include "core/cuda/graph.h"
#include "core/cuda/kernel_choice.h"
#include "core/numerics.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr const char* kEnv = "LOOM_TEST_KERNEL_CHOICE";

// Two candidates counting their runs; "declines" fails when told to.
struct Counted {
  int fast_runs = 0, declining_runs = 0, built = 0;
  bool decline = false;

  cuda::CandidateRuns make() {
    ++built;
    return {[this] {
              ++declining_runs;
              return !decline;
            },
            [this] {
              ++fast_runs;
              return true;
            }};
  }
};

}  // namespace

LOOM_GPU_TEST_CASE("a key is raced once; a declining candidate is never chosen") {
  unsetenv(kEnv);
  cuda::KernelChoice choice(kEnv);
  Counted counted;
  counted.decline = true;
  auto make = [&] { return counted.make(); };
  CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "runs");
  CHECK(counted.built == 1);
  CHECK(counted.declining_runs == 1);  // the warm-up only
  CHECK(counted.fast_runs == 1 + cuda::KernelChoice::kTimedRuns);
  CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "runs");
  CHECK(counted.built == 1);  // cached: nothing ran again
  CHECK(choice.choose("shape b", {"declines", "runs"}, make) == "runs");
  CHECK(counted.built == 2);
}

LOOM_GPU_TEST_CASE("under a deterministic policy the first candidate runs, with no race; forcing still works") {
  unsetenv(kEnv);
  cuda::KernelChoice choice(kEnv);
  Counted counted;
  counted.decline = true;  // a race would pick "runs"
  auto make = [&] { return counted.make(); };
  {
    NumericsGuard deterministic({.deterministic = true});
    CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "declines");
    CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "declines");
    CHECK(counted.built == 0);
    setenv(kEnv, "runs", 1);
    CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "runs");
    unsetenv(kEnv);
  }
  CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "runs");  // the policy's pick was not cached
  CHECK(counted.built == 1);
}

LOOM_GPU_TEST_CASE("the environment variable forces a candidate without a race") {
  cuda::KernelChoice choice(kEnv);
  Counted counted;
  counted.decline = true;  // so that the race below has one possible winner
  auto make = [&] { return counted.make(); };
  setenv(kEnv, "declines", 1);
  CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "declines");
  CHECK(counted.built == 0);
  setenv(kEnv, "slowest", 1);
  CHECK_THROWS_WITH_FRAGMENT(choice.choose("shape a", {"declines", "runs"}, make), ValueError,
                             "use one of: auto, declines, runs");
  setenv(kEnv, "auto", 1);
  CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "runs");
  CHECK(counted.built == 1);
  unsetenv(kEnv);
}

LOOM_GPU_TEST_CASE("inside a capture an unknown key gets the first candidate, uncached") {
  unsetenv(kEnv);
  cuda::KernelChoice choice(kEnv);
  Counted counted;
  counted.decline = true;
  auto make = [&] { return counted.make(); };
  std::string picked;
  Tensor work = zeros({4}, {.device = testing::test_gpu()});
  cuda::CudaGraph graph;
  graph.capture([&] {
    picked = choice.choose("shape a", {"declines", "runs"}, make);
    work.fill_(1);  // the graph records something
  });
  CHECK(picked == "declines");
  CHECK(counted.built == 0);
  CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "runs");  // raced now
  CHECK(counted.built == 1);
}

LOOM_GPU_TEST_CASE("after forget_kernel_choices a key races again, outside a capture only") {
  unsetenv(kEnv);
  cuda::KernelChoice choice(kEnv);
  Counted counted;
  auto make = [&] { return counted.make(); };
  counted.decline = true;
  CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "runs");
  CHECK(counted.built == 1);
  cuda::forget_kernel_choices();
  counted.decline = false;  // the stale winner must stand inside a capture
  std::string picked;
  Tensor work = zeros({4}, {.device = testing::test_gpu()});
  cuda::CudaGraph graph;
  graph.capture([&] {
    picked = choice.choose("shape a", {"declines", "runs"}, make);
    work.fill_(1);
  });
  CHECK(picked == "runs");
  CHECK(counted.built == 1);
  counted.decline = true;
  CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "runs");  // raced again
  CHECK(counted.built == 2);
  CHECK(choice.choose("shape a", {"declines", "runs"}, make) == "runs");
  CHECK(counted.built == 2);  // and cached again
}

#endif  // LOOM_WITH_CUDA
