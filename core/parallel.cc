// File: core/parallel.cc
// Loom's loops on the OpenMP runtime's threads (GNU libgomp), the pool oneDNN
// runs on, so that one set of threads serves both. libgomp is loaded at the
// first loop rather than linked: it reads its settings once, while it loads,
// and Loom first asks for a passive wait policy (idle threads sleep at once
// instead of spinning for milliseconds; the cores are shared with other
// processes). A loop enters the runtime through GOMP_parallel, the entry point
// every `#pragma omp parallel` compiles to (libgomp's documented ABI).
#include "core/parallel.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

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

std::atomic<int>& thread_count() {
  static std::atomic<int> count{threads_from_environment()};
  return count;
}

// The entry points of libgomp that Loom calls.
struct Openmp {
  void (*parallel)(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) = nullptr;
  void (*set_num_threads)(int) = nullptr;
};

void* gomp_symbol(void* library, const char* name) {
  void* found = dlsym(library, name);
  LOOM_CHECK(found != nullptr, Error,
             "[parallel] libgomp.so.1 has no symbol {}; install Debian's libgomp1 (tools/setup.sh "
             "does)",
             name);
  return found;
}

Openmp load_openmp() {
  // Read once, while libgomp loads (a libgomp the program already had keeps its settings).
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  void* library = dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL);
  LOOM_CHECK(library != nullptr, Error,
             "[parallel] the CPU thread pool needs the OpenMP runtime, which did not load ({}); "
             "install Debian's libgomp1 (tools/setup.sh does)",
             dlerror());
  Openmp omp;
  omp.parallel = reinterpret_cast<decltype(omp.parallel)>(gomp_symbol(library, "GOMP_parallel"));
  omp.set_num_threads =
      reinterpret_cast<decltype(omp.set_num_threads)>(gomp_symbol(library, "omp_set_num_threads"));
  return omp;
}

const Openmp& openmp() {
  static const Openmp loaded = load_openmp();
  return loaded;
}

// One loop in flight: fixed chunks handed out by an atomic counter, so which
// thread runs a chunk varies but the chunks themselves do not.
struct Loop {
  const std::function<void(int64_t, int64_t, int64_t)>* fn = nullptr;
  int64_t begin = 0, end = 0, chunk_size = 1, chunks = 0;
  std::atomic<int64_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;

  void drain() {
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) run_chunk(c);
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

// What each thread of the OpenMP team runs (the caller is one of them).
void drain_on_team_thread(void* data) {
  const bool outer = t_in_parallel_region;
  t_in_parallel_region = true;
  static_cast<Loop*>(data)->drain();
  t_in_parallel_region = outer;
}

// Held by the thread whose loop runs on the team: a loop started from another
// thread meanwhile runs inline rather than adding a second team of threads.
std::mutex& team_mutex() {
  static std::mutex m;
  return m;
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
  std::unique_lock<std::mutex> team(team_mutex(), std::defer_lock);
  if (loop.chunks == 1 || t_in_parallel_region || !team.try_lock()) {
    run_chunks_inline(loop);
  } else {
    openmp().parallel(drain_on_team_thread, &loop, static_cast<unsigned>(loop.chunks), 0);
  }
  if (loop.error) std::rethrow_exception(loop.error);
}

}  // namespace

int num_threads() { return thread_count().load(); }

void set_num_threads(int n) {
  LOOM_CHECK(n >= 1 && n <= 1024, ValueError,
             "[set_num_threads] the thread count must be in [1, 1024], got {}", n);
  LOOM_CHECK(!t_in_parallel_region, ValueError,
             "[set_num_threads] called from inside a parallel_for; resize the pool between loops");
  thread_count() = n;
}

void bind_openmp_threads(int n) {
  LOOM_CHECK(n >= 1 && n <= num_threads(), ValueError,
             "[bind_openmp_threads] the team size must be in [1, {}] (the pool), got {}", num_threads(), n);
  thread_local int bound = 0;
  if (bound == n) return;
  openmp().set_num_threads(n);
  bound = n;
}

void bind_openmp_to_pool() { bind_openmp_threads(num_threads()); }

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
