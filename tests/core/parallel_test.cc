// File: tests/core/parallel_test.cc
// The CPU thread pool: every index runs exactly once, chunks are fixed by the
// range, the grain and the thread count, nested loops run inline, exceptions
// reach the caller, and a loop from a second thread while the pool is busy
// still completes.
#include "core/parallel.h"

#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"

namespace loom {
namespace {

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

TEST_CASE("parallel_for visits every index of the range exactly once") {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3, 8}) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> hits(1001);
    parallel_for(7, 1001, 5, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < 1001; ++i) CHECK(hits[i].load() == (i >= 7 ? 1 : 0));
  }
  int calls = 0;
  parallel_for(3, 3, 1, [&](int64_t, int64_t) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE("chunks depend only on the range, the grain and the thread count") {
  ThreadCountGuard guard;
  set_num_threads(4);
  CHECK(num_threads() == 4);
  CHECK(parallel_chunks(100, 1) == 4);
  CHECK(parallel_chunks(100, 40) == 3);  // 40, 40, 20
  CHECK(parallel_chunks(3, 1) == 3);
  CHECK(parallel_chunks(5, 1) == 3);  // chunks of 2: 2, 2, 1
  CHECK(parallel_chunks(0, 1) == 0);
  std::vector<int64_t> begins(3, -1), ends(3, -1);
  parallel_for_chunks(0, 100, 40, [&](int64_t chunk, int64_t b, int64_t e) {
    begins[chunk] = b;
    ends[chunk] = e;
  });
  CHECK(begins == std::vector<int64_t>{0, 34, 68});
  CHECK(ends == std::vector<int64_t>{34, 68, 100});
  set_num_threads(1);
  CHECK(parallel_chunks(100, 1) == 1);
}

TEST_CASE("a loop inside a loop runs inline on the chunk's thread") {
  ThreadCountGuard guard;
  set_num_threads(2);
  CHECK_FALSE(in_parallel_region());
  std::atomic<int> inner_on_same_thread{0}, total{0};
  parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    CHECK(in_parallel_region());
    const std::thread::id outer = std::this_thread::get_id();
    parallel_for(0, 100, 1, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() == outer && b == 0 && e == 100) inner_on_same_thread++;
      total += static_cast<int>(e - b);
    });
  });
  CHECK(inner_on_same_thread.load() == 2);
  CHECK(total.load() == 200);
  CHECK_FALSE(in_parallel_region());
}

TEST_CASE("an exception in a chunk reaches the caller after the other chunks finish") {
  ThreadCountGuard guard;
  set_num_threads(3);
  std::atomic<int> finished{0};
  CHECK_THROWS_AS(parallel_for(0, 3, 1,
                               [&](int64_t b, int64_t) {
                                 if (b == 1) throw std::runtime_error("chunk 1");
                                 finished++;
                               }),
                  std::runtime_error);
  CHECK(finished.load() == 2);
  CHECK_FALSE(in_parallel_region());
}

TEST_CASE("loops from two threads at once both complete") {
  ThreadCountGuard guard;
  set_num_threads(2);
  std::atomic<int64_t> sum_a{0}, sum_b{0};
  auto run = [](std::atomic<int64_t>& sum) {
    for (int rep = 0; rep < 200; ++rep) {
      parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sum += i;
      });
    }
  };
  std::thread other([&] { run(sum_b); });
  run(sum_a);
  other.join();
  CHECK(sum_a.load() == 200 * 2016);
  CHECK(sum_b.load() == 200 * 2016);
}

TEST_CASE("set_num_threads rejects counts outside [1, 1024]") {
  CHECK_THROWS_AS(set_num_threads(0), ValueError);
  CHECK_THROWS_AS(set_num_threads(5000), ValueError);
}

}  // namespace
}  // namespace loom
