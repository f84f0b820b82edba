// File: core/capture_plan.cc
// Recording a capture's requests and placing them in one arena (capture_plan.h).
#include "core/capture_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/block_pool.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

// How far ahead of the next planned request take looks for one of the asked
// size: a capture that adds or drops a few requests stays in step with its plan.
constexpr size_t kLookahead = 16;

bool overlap_in_time(const CaptureRequest& a, const CaptureRequest& b) {
  return a.made < b.freed && b.made < a.freed;
}

}  // namespace

void CaptureRecorder::allocated(const void* ptr, size_t size) {
  open_[ptr] = requests_.size();
  requests_.push_back({.size = size, .made = clock_++, .freed = 0});
}

void CaptureRecorder::freed(const void* ptr) {
  auto it = open_.find(ptr);
  if (it == open_.end()) return;
  requests_[it->second].freed = clock_++;
  open_.erase(it);
}

std::vector<CaptureRequest> CaptureRecorder::requests() const {
  std::vector<CaptureRequest> out = requests_;
  for (const auto& [ptr, index] : open_) {
    out[index].freed = clock_;
    out[index].outlives = true;
  }
  return out;
}

CapturePlan::CapturePlan(std::vector<CaptureRequest> requests)
    : requests_(std::move(requests)), offsets_(requests_.size(), 0), served_(requests_.size(), false) {
  std::vector<size_t> order(requests_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests_[a].size > requests_[b].size; });
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of the placed blocks alive with this one
  for (size_t i : order) {
    if (requests_[i].outlives) {
      if (requests_[i].size > kSmallLimit) large_outliving_bytes_ += requests_[i].size;
      continue;
    }
    busy.clear();
    for (size_t j : placed) {
      if (overlap_in_time(requests_[i], requests_[j])) busy.emplace_back(offsets_[j], offsets_[j] + requests_[j].size);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + requests_[i].size <= begin) break;
      offset = std::max(offset, end);
    }
    offsets_[i] = offset;
    placed.push_back(i);
    arena_bytes_ = std::max(arena_bytes_, offset + requests_[i].size);
  }
}

std::optional<size_t> CapturePlan::take(size_t size) {
  const size_t stop = std::min(requests_.size(), next_ + kLookahead);
  for (size_t k = next_; k < stop; ++k) {
    if (served_[k] || requests_[k].size != size) continue;
    served_[k] = true;
    next_ = k + 1;
    if (requests_[k].outlives) return std::nullopt;  // the pool's, as planned
    if (!is_free(offsets_[k], size)) break;
    live_.emplace(offsets_[k], offsets_[k] + size);
    return offsets_[k];
  }
  ++misses_;
  return std::nullopt;
}

void CapturePlan::give_back(size_t offset) {
  LOOM_CHECK(live_.erase(offset) == 1, ValueError,
             "[capture plan] give_back({}): no planned block starts there, or it was given back already", offset);
}

// Planned blocks handed out never overlap, so only the last one starting before
// the range's end can reach into it.
bool CapturePlan::is_free(size_t offset, size_t size) const {
  auto after = live_.lower_bound(offset + size);
  if (after == live_.begin()) return true;
  return std::prev(after)->second <= offset;
}

}  // namespace loom::cuda
