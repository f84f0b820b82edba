// File: tests/core/cudnn/build_queue_test.cc
// The background plan builders' scheduler with fake jobs: every job runs once,
// an id is never queued twice while it is outstanding, no more jobs run at once
// than there are threads, a job that throws does not end its worker, a bounded
// wait_idle_for() (at exit, before stop()) lets the queued ones run, and
// stop() (at exit) lets the running job finish and drops the rest.
#include "core/cudnn/build_queue.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace loom::cudnn {
namespace {

TEST_CASE("every submitted job runs once") {
  BuildQueue queue(3);
  std::atomic<int> runs[20] = {};
  for (uint64_t id = 0; id < 20; ++id) {
    CHECK(queue.submit(id, [&runs, id] { ++runs[id]; }));
  }
  queue.wait_idle();
  CHECK(queue.outstanding() == 0);
  for (const auto& r : runs) CHECK(r.load() == 1);
}

TEST_CASE("an id is queued once while outstanding, and again after it finished") {
  BuildQueue queue(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> runs = 0;
  CHECK(queue.submit(7, [&, released] {
    released.wait();
    ++runs;
  }));
  CHECK_FALSE(queue.submit(7, [&] { ++runs; }));
  CHECK(queue.outstanding() == 1);
  release.set_value();
  queue.wait_idle();
  CHECK(runs == 1);
  CHECK(queue.submit(7, [&] { ++runs; }));
  queue.wait_idle();
  CHECK(runs == 2);
}

TEST_CASE("no more jobs run at once than there are threads, and all threads are used") {
  constexpr int kThreads = 3;
  BuildQueue queue(kThreads);
  std::mutex mutex;
  std::condition_variable changed;
  int running = 0, most = 0;
  bool open = false;
  for (uint64_t id = 0; id < 2 * kThreads; ++id) {
    queue.submit(id, [&] {
      std::unique_lock lock(mutex);
      most = std::max(most, ++running);
      changed.notify_all();
      changed.wait(lock, [&] { return open; });
      --running;
    });
  }
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return running == kThreads; });  // hangs if fewer threads run jobs
    open = true;
  }
  changed.notify_all();
  queue.wait_idle();
  CHECK(most == kThreads);
}

TEST_CASE("a job that throws does not stop its worker") {
  BuildQueue queue(1);
  std::atomic<int> runs = 0;
  queue.submit(1, [] { throw std::runtime_error("a failed build"); });
  queue.submit(2, [&] { ++runs; });
  queue.wait_idle();
  CHECK(runs == 1);
}

TEST_CASE("stop waits for the running job, drops the queued ones and refuses later submits") {
  BuildQueue queue(1);
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> finished = false;
  std::atomic<int> queued_runs = 0;
  queue.submit(1, [&, released] {
    started.set_value();
    released.wait();
    finished = true;
  });
  started.get_future().wait();
  queue.submit(2, [&] { ++queued_runs; });
  // Job 1 ends only once stop() has dropped job 2 (one id left): released any
  // earlier, the worker could take job 2 before stop() ran.
  std::thread releaser([&] {
    while (queue.outstanding() != 1) std::this_thread::yield();
    release.set_value();
  });
  queue.stop();
  releaser.join();
  CHECK(finished.load());  // stop returned only after the running job ended
  CHECK(queue.outstanding() == 0);
  CHECK_FALSE(queue.submit(3, [&] { ++queued_runs; }));
  CHECK(queued_runs == 0);
}

// Set by a worker's thread-local object when that worker ends.
std::atomic<int> workers_ended = 0;
struct EndMarker {
  ~EndMarker() { ++workers_ended; }
};

TEST_CASE("retire stops like stop, and a retired queue's destructor still ends its workers") {
  workers_ended = 0;
  {
    BuildQueue queue(2);
    std::atomic<int> runs = 0;
    for (uint64_t id = 1; id <= 2; ++id) {
      queue.submit(id, [&] {
        thread_local EndMarker marker;
        (void)marker;
        ++runs;
      });
    }
    queue.wait_idle();
    queue.retire();
    CHECK(queue.outstanding() == 0);
    CHECK_FALSE(queue.submit(3, [&] { ++runs; }));
    CHECK(runs == 2);
  }  // joins: the workers must end, not stay parked
  CHECK(workers_ended.load() >= 1);
}

TEST_CASE("wait_idle_for gives up at its limit while a job runs, and reports idle once it ends") {
  BuildQueue queue(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> runs = 0;
  queue.submit(1, [&, released] {
    released.wait();
    ++runs;
  });
  queue.submit(2, [&] { ++runs; });  // queued behind the first: at exit it runs too
  CHECK_FALSE(queue.wait_idle_for(std::chrono::milliseconds(20)));
  CHECK(queue.outstanding() == 2);
  release.set_value();
  CHECK(queue.wait_idle_for(std::chrono::seconds(10)));
  CHECK(runs == 2);
  CHECK(queue.wait_idle_for(std::chrono::milliseconds(0)));  // idle already: no wait
}

TEST_CASE("a queue needs at least one thread") {
  CHECK_THROWS(BuildQueue(0));
}

}  // namespace
}  // namespace loom::cudnn
