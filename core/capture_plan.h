// File: core/capture_plan.h
// The memory of a captured CUDA graph, planned from a recording of an earlier
// capture of the same work. A caching pool serves a capture's requests one at a
// time without knowing which come next, so a 256 MiB request after two freed
// 128 MiB blocks takes a new segment: resnet9's training step (batch 512, tf32)
// kept 1,739 MiB alive at most but its private pool held 2,618 MiB. Knowing
// every request's size and lifetime, a plan places them in one arena barely
// larger than the most bytes alive at once (1,743 MiB there):
//
//   CaptureRecorder recorder;              // the first capture: a caching pool
//   ... recorder.allocated(ptr, size), recorder.freed(ptr) ...
//   CapturePlan plan(recorder.requests());  // the next capture: the arena
//   std::optional<size_t> at = plan.take(size);  // an offset, or the pool
//   ... plan.give_back(*at) ...
//
// Host logic only (no CUDA): the allocator (core/cuda/allocator.cc) binds it to
// device memory. A later capture may differ (other cuDNN plans, other
// workspaces): take matches requests by order and size, and never hands out
// bytes that a live planned block holds, so a divergence costs memory (the
// pool serves the rest), never correctness.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

namespace loom::cuda {

// One request of a recorded capture: its size (rounded as the pool rounds it)
// and when it was made and freed, on a clock that ticks at every allocation and
// free of the capture. A block the capture never freed (a graph output, a
// gradient) outlives it: the plan leaves it to the pool, so that once the graph
// is released nothing it keeps pins the arena.
struct CaptureRequest {
  size_t size = 0;
  int64_t made = 0;
  int64_t freed = 0;  // the clock's end for one that outlives the capture
  bool outlives = false;
};

class CaptureRecorder {
 public:
  void allocated(const void* ptr, size_t size);
  // Frees of pointers it did not see allocated are ignored (general-pool blocks).
  void freed(const void* ptr);
  // The requests in allocation order; the still-live ones end after the last event.
  std::vector<CaptureRequest> requests() const;

 private:
  std::vector<CaptureRequest> requests_;
  std::unordered_map<const void*, size_t> open_;  // live pointer -> request index
  int64_t clock_ = 0;
};

class CapturePlan {
 public:
  // Places the requests freed within the capture, largest first, each at the
  // lowest offset clear of the placed ones whose lifetimes overlap its own.
  explicit CapturePlan(std::vector<CaptureRequest> requests);

  // Bytes of the arena the offsets fall in.
  size_t arena_bytes() const { return arena_bytes_; }
  // Bytes of the recorded requests that outlive the capture and are large (over
  // kSmallLimit, core/block_pool.h): the pool serves them, from one segment the
  // allocator reserves for them all, so that a 2.25 MiB gradient does not take a
  // 4 MiB segment of its own.
  size_t large_outliving_bytes() const { return large_outliving_bytes_; }
  // The offset for the next request of `size`: the first recorded request of
  // that size among the next few not yet served, if its bytes are free now.
  // nullopt sends the request to the pool: one recorded as outliving the
  // capture, or a miss (counted in misses()).
  std::optional<size_t> take(size_t size);
  // Frees the planned block at `offset` (from take).
  void give_back(size_t offset);
  // Requests take sent to the pool.
  int64_t misses() const { return misses_; }
  // Planned blocks handed out and not given back.
  size_t live_blocks() const { return live_.size(); }

 private:
  bool is_free(size_t offset, size_t size) const;

  std::vector<CaptureRequest> requests_;
  std::vector<size_t> offsets_;
  std::vector<bool> served_;
  size_t arena_bytes_ = 0;
  size_t large_outliving_bytes_ = 0;
  size_t next_ = 0;                  // the first request not yet served or skipped
  std::map<size_t, size_t> live_;    // offset -> end of the planned blocks handed out
  int64_t misses_ = 0;
};

}  // namespace loom::cuda
