// File: core/cudnn/build_queue.cc
// Background plan builds: worker threads, one job per plan-cache entry.
#include "core/cudnn/build_queue.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace loom::cudnn {

BuildQueue::BuildQueue(int threads) {
  LOOM_CHECK(threads >= 1, ValueError, "[cudnn] a plan build queue needs at least 1 thread, got {}",
             threads);
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

BuildQueue::~BuildQueue() {
  {
    std::lock_guard lock(mutex_);
    retired_ = false;  // a retired queue's workers end too, so they can be joined
  }
  stop();
  for (std::thread& worker : workers_) worker.join();
}

void BuildQueue::retire() {
  {
    std::lock_guard lock(mutex_);
    retired_ = true;
  }
  stop();
}

void BuildQueue::stop() {
  std::unique_lock lock(mutex_);
  stopping_ = true;
  for (const auto& queued : queue_) ids_.erase(queued.first);
  queue_.clear();
  wake_.notify_all();
  idle_.wait(lock, [this] { return ids_.empty(); });
}

bool BuildQueue::submit(uint64_t id, Job job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !ids_.insert(id).second) return false;
    queue_.emplace_back(id, std::move(job));
  }
  wake_.notify_one();
  return true;
}

void BuildQueue::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return ids_.empty(); });
}

bool BuildQueue::wait_idle_for(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, limit, [this] { return ids_.empty(); });
}

size_t BuildQueue::outstanding() const {
  std::lock_guard lock(mutex_);
  return ids_.size();
}

void BuildQueue::work() {
  for (;;) {
    std::pair<uint64_t, Job> next;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return (stopping_ && !retired_) || (!stopping_ && !queue_.empty()); });
      if (stopping_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      next.second();
    } catch (...) {  // a job reports its own failure; one that escapes must not end the worker
    }
    {
      std::lock_guard lock(mutex_);
      ids_.erase(next.first);
    }
    idle_.notify_all();
  }
}

int default_build_threads() {
  if (const char* text = std::getenv("LOOM_CUDNN_BUILD_THREADS")) {
    const int threads = std::atoi(text);
    LOOM_CHECK(threads >= 1, ValueError,
               "[cudnn] LOOM_CUDNN_BUILD_THREADS='{}' must be a whole number >= 1", text);
    return threads;
  }
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hardware / 2, 1, 8);
}

}  // namespace loom::cudnn
