// File: tests/core/capture_plan_test.cc
// Planning a captured graph's memory: the recorder's lifetimes, the plan's
// arena against the most bytes alive at once, and take's promise that planned
// blocks alive together never share a byte, on random request sequences, both
// replayed as recorded and diverging from the recording.
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

size_t peak_live(const std::vector<Event>& events) {
  std::vector<size_t> sizes;
  size_t live = 0, peak = 0;
  for (const Event& e : events) {
    if (e.allocate) {
      sizes.push_back(e.size_or_index);
      live += e.size_or_index;
      peak = std::max(peak, live);
    } else {
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
  const std::vector<Event> events = {{true, 128 * kMiB}, {true, 128 * kMiB}, {true, 64 * kMiB},
                                     {false, 0},         {false, 1},         {true, 256 * kMiB}};
  const std::vector<CaptureRequest> requests = record(events);
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].made == 0);
  CHECK(requests[0].freed == 3);
  CHECK(requests[2].freed == 6);  // never freed: alive to the end
  CapturePlan plan(requests);
  CHECK(plan.arena_bytes() == 320 * kMiB);  // the most alive at once: c and d
  const std::vector<std::optional<size_t>> at = serve(plan, events);
  CHECK(plan.misses() == 0);
  CHECK(std::all_of(at.begin(), at.end(), [](const auto& offset) { return offset.has_value(); }));
  CHECK(plan.live_blocks() == 2);
}

TEST_CASE("random captures: the arena is near the live peak and a replay as recorded is served in full") {
  std::mt19937 rng(20261201);
  for (int trial = 0; trial < 200; ++trial) {
    CAPTURE(trial);
    const std::vector<Event> events = random_events(rng, 1 + trial % 97);
    CapturePlan plan(record(events));
    const size_t peak = peak_live(events);
    CHECK(plan.arena_bytes() >= peak);
    CHECK(plan.arena_bytes() <= 2 * peak);  // greedy by size stays well under this in practice
    serve(plan, events);
    CHECK(plan.misses() == 0);
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
  CapturePlan plan(record({{true, 1024}}));
  REQUIRE(plan.take(1024) == std::optional<size_t>(0));
  CHECK_THROWS_AS(plan.give_back(512), ValueError);
  plan.give_back(0);
  CHECK_THROWS_AS(plan.give_back(0), ValueError);
  CHECK(plan.take(1024) == std::nullopt);  // served once already
  CHECK(plan.misses() == 1);
}
