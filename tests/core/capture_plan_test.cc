// File: tests/core/capture_plan_test.cc
// Planning a captured graph's memory: the recorder's lifetimes, the plan's
// arena against the most bytes alive at once, blocks that outlive the capture
// left to the pool, and take's promise that planned blocks alive together never
// share a byte, on random request sequences, both replayed as recorded and
// diverging from the recording.
#include "core/capture_plan.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "core/error.h"

using namespace loom;
using namespace loom::cuda;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// A capture's events: allocate `size` (rounded to 512 B, as the pool rounds) or
// free the live block made by allocation `index`.
struct Event {
  bool allocate;
  size_t size_or_index;
};

std::vector<Event> random_events(std::mt19937& rng, int allocations) {
  std::vector<Event> events;
  std::vector<size_t> live;
  std::uniform_int_distribution<int> coin(0, 2);
  std::uniform_int_distribution<size_t> blocks(1, 4096);  // 512 B .. 2 MiB
  for (int made = 0; made < allocations;) {
    if (!live.empty() && coin(rng) == 0) {
      const size_t pick = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      events.push_back({false, live[pick]});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    } else {
      events.push_back({true, 512 * blocks(rng)});
      live.push_back(static_cast<size_t>(made++));
    }
  }
  return events;  // what is still live is a graph output
}

std::vector<CaptureRequest> record(const std::vector<Event>& events) {
  CaptureRecorder recorder;
  std::vector<const void*> ptrs;
  for (const Event& e : events) {
    if (e.allocate) {
      ptrs.push_back(reinterpret_cast<const void*>(0x1000 * (ptrs.size() + 1)));
      recorder.allocated(ptrs.back(), e.size_or_index);
    } else {
      recorder.freed(ptrs[e.size_or_index]);
    }
  }
  return recorder.requests();
}

// The most bytes alive at once among the blocks freed within the capture.
size_t peak_freed_within(const std::vector<Event>& events) {
  std::vector<size_t> sizes;
  std::vector<bool> freed;
  for (const Event& e : events) {
    if (e.allocate) {
      sizes.push_back(e.size_or_index);
      freed.push_back(false);
    } else {
      freed[e.size_or_index] = true;
    }
  }
  size_t live = 0, peak = 0, made = 0;
  for (const Event& e : events) {
    if (e.allocate && freed[made++]) {
      live += e.size_or_index;
      peak = std::max(peak, live);
    } else if (!e.allocate) {
      live -= sizes[e.size_or_index];
    }
  }
  return peak;
}

// Serves `events` from `plan` (the pool standing in where take declines) and
// checks that no two live planned blocks overlap. Returns the planned offsets.
std::vector<std::optional<size_t>> serve(CapturePlan& plan, const std::vector<Event>& events) {
  std::vector<std::optional<size_t>> at;
  std::vector<size_t> sizes;
  std::map<size_t, size_t> live;  // offset -> end, checked independently of the plan
  for (const Event& e : events) {
    if (e.allocate) {
      const std::optional<size_t> offset = plan.take(e.size_or_index);
      at.push_back(offset);
      sizes.push_back(e.size_or_index);
      if (!offset) continue;
      CHECK(*offset + e.size_or_index <= plan.arena_bytes());
      for (const auto& [begin, end] : live) {
        CHECK_MESSAGE((*offset + e.size_or_index <= begin || end <= *offset), "planned blocks overlap");
      }
      live.emplace(*offset, *offset + e.size_or_index);
    } else if (at[e.size_or_index]) {
      plan.give_back(*at[e.size_or_index]);
      live.erase(*at[e.size_or_index]);
    }
  }
  return at;
}

}  // namespace

TEST_CASE("two freed halves and a whole: the plan reuses their bytes, where a pool takes a new segment") {
  // a = 128 MiB, b = 128 MiB, both freed, then c = 256 MiB while d = 64 MiB lives on.
  const std::vector<Event> events = {{true, 128 * kMiB}, {true, 128 * kMiB}, {true, 64 * kMiB}, {false, 0},
                                     {false, 1},         {true, 256 * kMiB}, {false, 3},        {false, 2}};
  const std::vector<CaptureRequest> requests = record(events);
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].made == 0);
  CHECK(requests[0].freed == 3);
  CHECK(requests[2].freed == 7);
  CHECK_FALSE(requests[2].outlives);
  CapturePlan plan(requests);
  CHECK(plan.arena_bytes() == 320 * kMiB);  // the most alive at once: c and d
  const std::vector<std::optional<size_t>> at = serve(plan, events);
  CHECK(plan.misses() == 0);
  CHECK(std::all_of(at.begin(), at.end(), [](const auto& offset) { return offset.has_value(); }));
  CHECK(plan.live_blocks() == 0);
}

TEST_CASE("blocks the capture never frees go to the pool as planned: not in the arena, not misses") {
  // a gradient (g, 8 MiB) made early and a graph output (o, 1 KiB) made last
  // outlive the capture; t1 and t2 (64 MiB each) are freed within it.
  const std::vector<Event> events = {{true, 8 * kMiB}, {true, 64 * kMiB}, {false, 1}, {true, 64 * kMiB},
                                     {false, 2},       {true, 1024}};
  const std::vector<CaptureRequest> requests = record(events);
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].outlives);
  CHECK(requests[0].freed == 6);  // the clock's end
  CHECK_FALSE(requests[1].outlives);
  CHECK(requests[3].outlives);
  CapturePlan plan(requests);
  CHECK(plan.arena_bytes() == 64 * kMiB);  // t1 and t2 share their bytes; g and o are the pool's
  CHECK(plan.large_outliving_bytes() == 8 * kMiB);  // g; o is small
  const std::vector<std::optional<size_t>> at = serve(plan, events);
  CHECK(plan.misses() == 0);
  CHECK(at == std::vector<std::optional<size_t>>{std::nullopt, 0, 0, std::nullopt});
  CHECK(plan.live_blocks() == 0);  // a released graph's arena holds nothing
}

TEST_CASE("random captures: the arena is near the live peak and a replay as recorded is served in full") {
  std::mt19937 rng(20261201);
  for (int trial = 0; trial < 200; ++trial) {
    CAPTURE(trial);
    const std::vector<Event> events = random_events(rng, 1 + trial % 97);
    const std::vector<CaptureRequest> requests = record(events);
    CapturePlan plan(requests);
    const size_t peak = peak_freed_within(events);
    CHECK(plan.arena_bytes() >= peak);
    CHECK(plan.arena_bytes() <= 2 * peak);  // greedy by size stays well under this in practice
    const std::vector<std::optional<size_t>> at = serve(plan, events);
    CHECK(plan.misses() == 0);
    CHECK(plan.live_blocks() == 0);
    for (size_t i = 0; i < requests.size(); ++i) {
      CAPTURE(i);
      CHECK(at[i].has_value() != requests[i].outlives);  // the arena's, or the pool's as planned
    }
  }
}

TEST_CASE("a capture that diverges from its recording misses, and planned blocks still never overlap") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    CAPTURE(trial);
    const std::vector<Event> recorded = random_events(rng, 40);
    std::vector<Event> diverged = recorded;  // other sizes, and frees moved later
    for (Event& e : diverged) {
      if (e.allocate && rng() % 5 == 0) e.size_or_index = 512 * (1 + rng() % 4096);
    }
    std::shuffle(diverged.begin() + static_cast<std::ptrdiff_t>(diverged.size() / 2), diverged.end(), rng);
    // A shuffle may put a free before its allocation: drop those frees.
    std::vector<Event> valid;
    int made = 0;
    for (const Event& e : diverged) {
      if (e.allocate) ++made;
      if (e.allocate || static_cast<int>(e.size_or_index) < made) valid.push_back(e);
    }
    CapturePlan plan(record(recorded));
    serve(plan, valid);  // its checks are the test: no overlap, inside the arena
  }
}

TEST_CASE("giving back an offset that is not a live planned block is a ValueError") {
  CapturePlan plan(record({{true, 1024}, {false, 0}}));
  REQUIRE(plan.take(1024) == std::optional<size_t>(0));
  CHECK_THROWS_AS(plan.give_back(512), ValueError);
  plan.give_back(0);
  CHECK_THROWS_AS(plan.give_back(0), ValueError);
  CHECK(plan.take(1024) == std::nullopt);  // served once already
  CHECK(plan.misses() == 1);
}
