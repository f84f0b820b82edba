// File: core/block_pool.cc
// Best fit, splitting and merging of device memory blocks (see block_pool.h).
#include "core/block_pool.h"

#include <algorithm>
#include <functional>
#include <memory>

namespace loom::cuda {

namespace {

size_t round_up(size_t bytes, size_t granularity) {
  return (bytes + granularity - 1) / granularity * granularity;
}

}  // namespace

size_t round_block_size(size_t bytes) {
  return std::max(kBlockGranularity, round_up(bytes, kBlockGranularity));
}

size_t segment_size_for(size_t block_size) {
  return block_size <= kSmallLimit ? kSegmentGranularity
                                   : round_up(block_size, kSegmentGranularity);
}

// Stream first, so that a best-fit search never leaves the caller's stream;
// then size (best fit), then address, which keeps equal sizes distinct.
bool BlockPool::BySize::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return std::less<StreamId>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<char*>()(a->ptr, b->ptr);
}

BlockPool::BlockPool(SegmentSource& source, AllocatorStats& stats)
    : source_(source), stats_(stats) {}

BlockPool::~BlockPool() {
  for (Block* head : segments_) {
    for (Block* block = head; block != nullptr;) {
      Block* next = block->next;
      delete block;
      block = next;
    }
  }
}

Block* BlockPool::take_cached(size_t size, StreamId stream) {
  FreeSet& free = size <= kSmallLimit ? small_free_ : large_free_;
  Block key;  // a null address sorts before every real block of the same size
  key.size = size;
  key.stream = stream;
  auto it = free.lower_bound(&key);
  if (it == free.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  free.erase(it);
  ++stats_.cache_hits;
  return hand_out(split(block, size));
}

Block* BlockPool::take_new(size_t size, StreamId stream) {
  Block* head = add_segment(segment_size_for(size), stream, size <= kSmallLimit, false);
  return head == nullptr ? nullptr : hand_out(split(head, size));
}

Block* BlockPool::take_exact(size_t bytes, StreamId stream) {
  Block* head = add_segment(bytes, stream, false, true);
  return head == nullptr ? nullptr : hand_out(head);
}

bool BlockPool::reserve(size_t bytes, StreamId stream) {
  Block* head = add_segment(segment_size_for(std::max(bytes, kSmallLimit + kBlockGranularity)), stream, false, false);
  if (head == nullptr) return false;
  large_free_.insert(head);
  return true;
}

void BlockPool::give_back(Block* block) {
  block->allocated = false;
  ++stats_.num_frees;
  stats_.allocated_bytes -= block->size;
  if (block->exact) {
    retired_.push_back(block);
    return;
  }
  if (block->prev != nullptr && !block->prev->allocated) {
    block = block->prev;
    free_set(block).erase(block);
    absorb_next(block);
  }
  if (block->next != nullptr && !block->next->allocated) {
    free_set(block->next).erase(block->next);
    absorb_next(block);
  }
  free_set(block).insert(block);
}

size_t BlockPool::release_cached() {
  size_t released = release_retired();
  for (FreeSet* free : {&small_free_, &large_free_}) {
    for (auto it = free->begin(); it != free->end();) {
      Block* block = *it;
      if (block->prev != nullptr || block->next != nullptr) {
        ++it;  // part of a segment still in use
        continue;
      }
      source_.release(block->ptr, block->size);  // first: if it throws, nothing changed
      it = free->erase(it);
      released += forget_segment(block);
    }
  }
  return released;
}

size_t BlockPool::release_retired() {
  size_t released = 0;
  while (!retired_.empty()) {
    Block* block = retired_.back();
    source_.release(block->ptr, block->size);
    retired_.pop_back();
    released += forget_segment(block);
  }
  return released;
}

PoolUsage BlockPool::usage() const {
  PoolUsage u;
  for (const Block* head : segments_) {
    ++u.segments;
    for (const Block* block = head; block != nullptr; block = block->next) {
      u.reserved_bytes += block->size;
      if (block->allocated) {
        u.allocated_bytes += block->size;
      } else {
        u.largest_free_bytes = std::max(u.largest_free_bytes, block->size);
      }
    }
  }
  return u;
}

Block* BlockPool::add_segment(size_t bytes, StreamId stream, bool small, bool exact) {
  auto head = std::make_unique<Block>();  // before acquiring, so a bad_alloc leaks no segment
  void* base = source_.acquire(bytes);
  if (base == nullptr) return nullptr;
  head->ptr = static_cast<char*>(base);
  head->size = bytes;
  head->stream = stream;
  head->small = small;
  head->exact = exact;
  ++stats_.num_cuda_mallocs;
  stats_.reserved_bytes += bytes;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  segments_.insert(head.get());
  return head.release();
}

// Drops the record of a wholly free segment the source has taken back.
size_t BlockPool::forget_segment(Block* head) {
  size_t bytes = head->size;
  ++stats_.num_cuda_frees;
  stats_.reserved_bytes -= bytes;
  segments_.erase(head);
  delete head;
  return bytes;
}

// Keeps the first `size` bytes of the free `block` and caches the tail, when it
// could serve a later request of the same kind: any small one, or a large one
// (over kSmallLimit, as large requests never come from small segments).
Block* BlockPool::split(Block* block, size_t size) {
  size_t rest = block->size - size;
  bool worth_keeping = block->small ? rest >= kBlockGranularity : rest > kSmallLimit;
  if (!worth_keeping) return block;
  auto tail = std::make_unique<Block>(*block);
  tail->ptr = block->ptr + size;
  tail->size = rest;
  tail->prev = block;
  tail->next = block->next;
  free_set(tail.get()).insert(tail.get());
  if (block->next != nullptr) block->next->prev = tail.get();
  block->next = tail.get();
  block->size = size;
  tail.release();
  return block;
}

// Grows `block` over its next neighbour, which is free and out of the free sets.
void BlockPool::absorb_next(Block* block) {
  Block* next = block->next;
  block->size += next->size;
  block->next = next->next;
  if (block->next != nullptr) block->next->prev = block;
  delete next;
}

Block* BlockPool::hand_out(Block* block) {
  block->allocated = true;
  ++stats_.num_allocs;
  stats_.allocated_bytes += block->size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return block;
}

}  // namespace loom::cuda
