// File: core/parallel.cc
// A fixed pool of worker threads that sleep on a condition variable between
// loops (never spinning: the cores are shared with BLAS and other processes).
// One loop runs at a time; a loop started from another thread while the pool
// is busy runs its chunks on that thread, in order.
#include "core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace loom {
namespace {

thread_local bool t_in_parallel_region = false;

// The cores this process may run on (its affinity mask, which containers and
// taskset narrow), else every core of the machine.
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int threads_from_environment() {
  const char* text = std::getenv("LOOM_NUM_THREADS");
  if (text != nullptr && *text != '\0') {
    char* end = nullptr;
    const long n = std::strtol(text, &end, 10);
    LOOM_CHECK(*end == '\0' && n >= 1 && n <= 1024, ValueError,
               "[parallel] LOOM_NUM_THREADS must be an integer in [1, 1024], got '{}'", text);
    return static_cast<int>(n);
  }
  return usable_cores();
}

// One loop in flight: fixed chunks handed out by an atomic counter, so which
// thread runs a chunk varies but the chunks themselves do not.
struct Loop {
  const std::function<void(int64_t, int64_t, int64_t)>* fn = nullptr;
  int64_t begin = 0, end = 0, chunk_size = 1, chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex error_mutex;
  std::exception_ptr error;

  // Runs chunks until none is left; true when this call finished the last one.
  bool drain() {
    int64_t finished = 0;
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      run_chunk(c);
      ++finished;
    }
    return finished > 0 && done.fetch_add(finished) + finished == chunks;
  }

  void run_chunk(int64_t c) {
    const int64_t b = begin + c * chunk_size, e = std::min(end, b + chunk_size);
    try {
      (*fn)(c, b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
};

class Pool {
 public:
  explicit Pool(int threads) : threads_(threads) {
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { work(); });
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int threads() const { return threads_; }

  // Runs every chunk of `loop`; false (nothing run) when another loop holds the pool.
  bool try_run(Loop& loop) {
    std::unique_lock<std::mutex> busy(busy_mutex_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      loop_ = &loop;
      ++generation_;
    }
    wake_.notify_all();
    t_in_parallel_region = true;
    loop.drain();
    t_in_parallel_region = false;
    std::unique_lock<std::mutex> lock(mutex_);
    // Workers still inside drain() hold a pointer to `loop`: wait for all of them.
    finished_.wait(lock, [&] { return loop.done.load() == loop.chunks && active_ == 0; });
    loop_ = nullptr;
    return true;
  }

 private:
  void work() {
    uint64_t seen = 0;
    t_in_parallel_region = true;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || (generation_ != seen && loop_ != nullptr); });
      if (stopping_) return;
      seen = generation_;
      Loop* loop = loop_;
      ++active_;
      lock.unlock();
      loop->drain();
      lock.lock();
      --active_;
      finished_.notify_all();
    }
  }

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex busy_mutex_;  // held by the thread whose loop runs on the pool
  std::mutex mutex_;       // guards loop_, generation_, active_, stopping_
  std::condition_variable wake_, finished_;
  Loop* loop_ = nullptr;
  uint64_t generation_ = 0;
  int active_ = 0;
  bool stopping_ = false;
};

std::mutex& pool_mutex() {
  static std::mutex m;
  return m;
}

std::unique_ptr<Pool>& pool_slot() {
  static std::unique_ptr<Pool> pool;
  return pool;
}

Pool& pool() {
  std::lock_guard<std::mutex> lock(pool_mutex());
  std::unique_ptr<Pool>& p = pool_slot();
  if (!p) p = std::make_unique<Pool>(threads_from_environment());
  return *p;
}

void run_chunks_inline(Loop& loop) {
  const bool outer = t_in_parallel_region;
  t_in_parallel_region = true;
  for (int64_t c = 0; c < loop.chunks; ++c) loop.run_chunk(c);
  t_in_parallel_region = outer;
}

void run_loop(int64_t begin, int64_t end, int64_t grain,
              const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  Loop loop;
  loop.fn = &fn;
  loop.begin = begin;
  loop.end = end;
  loop.chunks = parallel_chunks(end - begin, grain);
  loop.chunk_size = (end - begin + loop.chunks - 1) / loop.chunks;
  if (loop.chunks == 1 || t_in_parallel_region || !pool().try_run(loop)) run_chunks_inline(loop);
  if (loop.error) std::rethrow_exception(loop.error);
}

}  // namespace

int num_threads() { return pool().threads(); }

void set_num_threads(int n) {
  LOOM_CHECK(n >= 1 && n <= 1024, ValueError,
             "[set_num_threads] the thread count must be in [1, 1024], got {}", n);
  LOOM_CHECK(!t_in_parallel_region, ValueError,
             "[set_num_threads] called from inside a parallel_for; resize the pool between loops");
  std::lock_guard<std::mutex> lock(pool_mutex());
  std::unique_ptr<Pool>& p = pool_slot();
  if (p && p->threads() == n) return;
  p.reset();
  p = std::make_unique<Pool>(n);
}

bool in_parallel_region() { return t_in_parallel_region; }

int64_t parallel_chunks(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  const int64_t by_grain = (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(num_threads(), by_grain);
  // Equal chunks of ceil(n / chunks) may cover n with fewer of them.
  const int64_t size = (n + chunks - 1) / chunks;
  return (n + size - 1) / size;
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  if (t_in_parallel_region || parallel_chunks(end - begin, grain) == 1) {
    fn(begin, end);
    return;
  }
  run_loop(begin, end, grain, [&](int64_t, int64_t b, int64_t e) { fn(b, e); });
}

void parallel_for_chunks(int64_t begin, int64_t end, int64_t grain,
                         const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  run_loop(begin, end, grain, fn);
}

}  // namespace loom
