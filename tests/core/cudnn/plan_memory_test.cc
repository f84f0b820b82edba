// File: tests/core/cudnn/plan_memory_test.cc
// Plan selection's memory rules without a GPU: which of an op's tensors test
// runs may bind as they are (not those sharing bytes with another), and the
// workspace limit below which a candidate is preferred.
#include "core/cudnn/plan_memory.h"

#include <doctest/doctest.h>

#include <random>
#include <vector>

namespace loom::cudnn {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

TEST_CASE("separate tensors are bound as they are; an in-place pair gets scratch copies") {
  // Batch norm's training graph: x, y, the running mean bound as input and output, a scale.
  const std::vector<BoundRange> ranges = {{.uid = 1, .begin = 0x10000, .bytes = 4096},
                                          {.uid = 2, .begin = 0x20000, .bytes = 4096},
                                          {.uid = 3, .begin = 0x30000, .bytes = 256},
                                          {.uid = 4, .begin = 0x30000, .bytes = 256},
                                          {.uid = 5, .begin = 0x30100, .bytes = 256}};
  CHECK(bindable_as_is(ranges) == std::vector<bool>{true, true, false, false, true});
}

TEST_CASE("partly overlapping views and ranges that only touch") {
  const std::vector<BoundRange> ranges = {{.uid = 1, .begin = 1000, .bytes = 100},
                                          {.uid = 2, .begin = 1099, .bytes = 10},   // shares byte 1099
                                          {.uid = 3, .begin = 1109, .bytes = 10},   // touches 2, shares nothing
                                          {.uid = 4, .begin = 1109, .bytes = 0}};   // empty
  CHECK(bindable_as_is(ranges) == std::vector<bool>{false, false, true, true});
  CHECK(bindable_as_is({}).empty());
}

TEST_CASE("random layouts: exactly the tensors that share bytes lose their binding") {
  std::mt19937_64 rng(32);
  for (int round = 0; round < 200; ++round) {
    CAPTURE(round);
    const size_t n = 2 + rng() % 10;
    std::vector<BoundRange> ranges;
    uintptr_t next = 4096;
    for (size_t i = 0; i < n; ++i) {
      const size_t bytes = 1 + rng() % 5000;
      ranges.push_back({.uid = static_cast<int64_t>(i), .begin = next, .bytes = bytes});
      next += bytes + rng() % 3 * 512;  // sometimes adjacent, never shared
    }
    CHECK(bindable_as_is(ranges) == std::vector<bool>(n, true));
    // One tensor made an alias of another (an op run in place).
    const size_t a = rng() % n, b = (a + 1 + rng() % (n - 1)) % n;
    ranges[b].begin = ranges[a].begin + rng() % ranges[a].bytes;
    std::vector<bool> expected(n, true);
    expected[a] = expected[b] = false;
    // The moved tensor may now cover others beyond a as well.
    for (size_t i = 0; i < n; ++i) {
      const bool shares = i != b && ranges[i].begin < ranges[b].begin + ranges[b].bytes &&
                          ranges[b].begin < ranges[i].begin + ranges[i].bytes;
      if (shares) expected[i] = false;
    }
    CHECK(bindable_as_is(ranges) == expected);
  }
}

TEST_CASE("the workspace limit: twice the op's tensors, never under the floor") {
  CHECK(preferred_workspace_limit(0) == kWorkspaceFloor);
  CHECK(preferred_workspace_limit(kMiB) == kWorkspaceFloor);
  CHECK(preferred_workspace_limit(6000 * kMiB) == 12000 * kMiB);
  CHECK(preferred_workspace_limit(kWorkspaceFloor / 2) == kWorkspaceFloor);
  CHECK(workspace_preferred(0, preferred_workspace_limit(0)));
  CHECK(workspace_preferred(static_cast<int64_t>(kWorkspaceFloor), preferred_workspace_limit(kMiB)));
  CHECK_FALSE(workspace_preferred(static_cast<int64_t>(kWorkspaceFloor) + 1, preferred_workspace_limit(kMiB)));
  // A U-Net's 16 -> 16 channel wgrad at 64x64, batch 512, fp32: 256 MiB of x and
  // dy; its fastest engine asks for 257.5 MiB.
  const size_t unet_wgrad = 2 * size_t{512} * 16 * 64 * 64 * 4 + 16 * 16 * 9 * 4;
  CHECK(workspace_preferred(static_cast<int64_t>(257.5 * kMiB), preferred_workspace_limit(unet_wgrad)));
  // VGG-16's second conv (64 -> 64 channels at 224 px), batch 512, fp32: x and
  // y of 6.1 GiB each; an engine asking for 40 GiB is passed over while another works.
  const size_t vgg_conv = 2 * size_t{512} * 64 * 224 * 224 * 4;
  CHECK(workspace_preferred(static_cast<int64_t>(2 * vgg_conv), preferred_workspace_limit(vgg_conv)));
  CHECK_FALSE(workspace_preferred(int64_t{40} << 30, preferred_workspace_limit(vgg_conv)));
}

TEST_CASE("where every engine is timed, the workspace limit is half the free memory, never below the usual one") {
  // resnet9's strict-fp32 step at batch 128 took up to 1.7 GiB of FFT workspace
  // for ops of about 100 MiB of tensors: over the usual limit, under half of a
  // mostly free GPU.
  const size_t op = 100 * kMiB, fft = 1700 * kMiB;
  CHECK_FALSE(workspace_preferred(static_cast<int64_t>(fft), preferred_workspace_limit(op)));
  CHECK(workspace_preferred(static_cast<int64_t>(fft), timed_workspace_limit(op, 130 * kGiB)));
  CHECK_FALSE(workspace_preferred(static_cast<int64_t>(fft), timed_workspace_limit(op, 3 * kGiB)));
  CHECK(timed_workspace_limit(op, 3 * kGiB) == 1536 * kMiB);
  // A nearly full device keeps the usual limit.
  CHECK(timed_workspace_limit(op, 0) == preferred_workspace_limit(op));
  CHECK(timed_workspace_limit(0, 32 * kMiB) == kWorkspaceFloor);
}

}  // namespace
}  // namespace loom::cudnn
