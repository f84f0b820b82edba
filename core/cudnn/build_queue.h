// File: core/cudnn/build_queue.h
// Background plan builds: a few worker threads that run one job per id (a
// plan-cache entry), never twice while it is queued or running. No CUDA here,
// so the scheduling is unit-tested with fake jobs. Jobs keep their CUDA work
// out of graph captures themselves (core/capture_gate.h, around test runs
// only: the runtime compilation, which takes longest, needs no gate).
//
//   BuildQueue queue(default_build_threads());
//   queue.submit(ticket, [=] { build_the_plan(); });
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

namespace loom::cudnn {

class BuildQueue {
 public:
  using Job = std::function<void()>;

  explicit BuildQueue(int threads);
  // stop(), then joins the workers.
  ~BuildQueue();
  BuildQueue(const BuildQueue&) = delete;
  BuildQueue& operator=(const BuildQueue&) = delete;

  // Queues `job` under `id`; false, and nothing queued, while `id` is already
  // queued or running. A job that throws is dropped (jobs report their own errors).
  bool submit(uint64_t id, Job job);
  // Blocks until nothing is queued or running.
  void wait_idle();
  // wait_idle() for at most `limit`; true when the queue went idle.
  bool wait_idle_for(std::chrono::milliseconds limit);
  // Jobs queued or running.
  size_t outstanding() const;
  // Drops the queued jobs, waits for the running ones and lets the workers
  // end; later submits are refused. For process exit, where a job still
  // running would outlive what it uses.
  void stop();
  // stop(), but the workers stay parked instead of ending: at process exit an
  // ending thread's teardown would run beside the process's own.
  void retire();
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  void work();

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // a job was queued, or stopping
  std::condition_variable idle_;  // a job finished
  std::deque<std::pair<uint64_t, Job>> queue_;
  std::unordered_set<uint64_t> ids_;  // queued or running
  bool stopping_ = false;
  bool retired_ = false;  // stopping, and the workers wait for good
  std::vector<std::thread> workers_;
};

// LOOM_CUDNN_BUILD_THREADS when set (>= 1), else half the hardware threads,
// between 1 and 8: NVRTC compiles are CPU-bound, and builders on every core
// would slow the training thread and the data loader down. Loom's locks cover
// only test runs and timing, yet on the H100 (CUDA 12, cuDNN 9.19) the runtime
// compilations of concurrent builds still finished about 0.2 s apart: NVRTC
// serializes compiles within a process, so what the builders overlap is the
// rest (heuristics, finalize, test runs), and each build avoided counts.
int default_build_threads();

}  // namespace loom::cudnn
