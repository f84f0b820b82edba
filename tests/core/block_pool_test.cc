// File: tests/core/block_pool_test.cc
// The caching allocator's block bookkeeping, on host memory through a fake
// segment source: rounding, best fit, reuse, splitting, merging, per-stream
// free lists, releasing segments, out of memory and pass-through blocks.
#include "core/block_pool.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <vector>

using namespace loom::cuda;

namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

// Segments of real (untouched) host memory, with a cap to play out of memory.
class FakeSource : public SegmentSource {
 public:
  explicit FakeSource(size_t capacity = 64 * kMiB) : capacity_(capacity) {}
  ~FakeSource() override {
    for (auto& [base, bytes] : live_) std::free(base);
  }

  void* acquire(size_t bytes) override {
    if (held_ + bytes > capacity_) return nullptr;
    void* base = std::aligned_alloc(kBlockGranularity, round_block_size(bytes));
    REQUIRE(base != nullptr);
    live_[base] = bytes;
    held_ += bytes;
    ++acquires;
    return base;
  }

  void release(void* base, size_t bytes) override {
    auto it = live_.find(base);
    REQUIRE_MESSAGE(it != live_.end(), "released a segment never acquired");
    CHECK_MESSAGE(it->second == bytes, "segment released with a different size");
    held_ -= it->second;
    std::free(base);
    live_.erase(it);
    ++releases;
  }

  size_t held() const { return held_; }
  int acquires = 0;
  int releases = 0;

 private:
  size_t capacity_;
  size_t held_ = 0;
  std::map<void*, size_t> live_;
};

// Two distinct stream identities; the pool never dereferences them.
const int kStreamTags[2] = {0, 0};
const StreamId kStreamA = &kStreamTags[0];
const StreamId kStreamB = &kStreamTags[1];

// A pool with its source and counters, as the allocator wires them.
struct Fixture {
  explicit Fixture(size_t capacity = 64 * kMiB) : source(capacity), pool(source, stats) {}
  ~Fixture() { pool.release_cached(); }

  // What the allocator does in caching mode.
  Block* take(size_t bytes, StreamId stream = kStreamA) {
    size_t size = round_block_size(bytes);
    Block* block = pool.take_cached(size, stream);
    return block != nullptr ? block : pool.take_new(size, stream);
  }

  FakeSource source;
  AllocatorStats stats;
  BlockPool pool;
};

}  // namespace

TEST_CASE("sizes round to 512 B and segments to 2 MiB") {
  CHECK(round_block_size(0) == 512);
  CHECK(round_block_size(1) == 512);
  CHECK(round_block_size(512) == 512);
  CHECK(round_block_size(513) == 1024);
  CHECK(segment_size_for(512) == 2 * kMiB);
  CHECK(segment_size_for(kMiB) == 2 * kMiB);  // the largest small request
  CHECK(segment_size_for(kMiB + 512) == 2 * kMiB);
  CHECK(segment_size_for(3 * kMiB + 512) == 4 * kMiB);
  CHECK(segment_size_for(kMaxRequest) == kMaxRequest);
}

TEST_CASE("a freed block returns allocated bytes to zero and stays reserved") {
  Fixture f;
  Block* a = f.take(1000);
  CHECK(a->size == 1024);
  CHECK(f.stats.allocated_bytes == 1024);
  CHECK(f.stats.reserved_bytes == 2 * kMiB);
  Block* b = f.take(3000);
  CHECK(f.stats.allocated_bytes == 1024 + 3072);
  f.pool.give_back(a);
  f.pool.give_back(b);
  CHECK(f.stats.allocated_bytes == 0);
  CHECK(f.stats.reserved_bytes == 2 * kMiB);
  CHECK(f.stats.peak_allocated_bytes == 1024 + 3072);
  CHECK(f.stats.peak_reserved_bytes == 2 * kMiB);
  CHECK(f.stats.num_allocs == 2);
  CHECK(f.stats.num_frees == 2);
  CHECK(f.stats.num_cuda_mallocs == 1);
  CHECK(f.source.acquires == 1);
}

TEST_CASE("the same size again is a cache hit at the same address, with no new segment") {
  Fixture f;
  Block* first = f.take(4 * kMiB);
  char* address = first->ptr;
  f.pool.give_back(first);
  for (int step = 0; step < 5; ++step) {
    Block* again = f.take(4 * kMiB);
    CHECK(again->ptr == address);
    f.pool.give_back(again);
  }
  CHECK(f.stats.cache_hits == 5);
  CHECK(f.stats.num_cuda_mallocs == 1);
  CHECK(f.source.acquires == 1);
}

TEST_CASE("small blocks are cut one after another from one segment") {
  Fixture f;
  Block* a = f.take(1000);
  Block* b = f.take(512);
  Block* c = f.take(100 * kKiB);
  CHECK(b->ptr == a->ptr + 1024);
  CHECK(c->ptr == b->ptr + 512);
  CHECK(f.source.acquires == 1);
  CHECK(f.stats.cache_hits == 2);  // b and c came from the cached rest of the segment
  f.pool.give_back(a);
  f.pool.give_back(b);
  f.pool.give_back(c);
}

TEST_CASE("best fit picks the smallest free block that is large enough") {
  Fixture f;
  Block* big = f.take(64 * kKiB);
  Block* fence1 = f.take(512);
  Block* fit = f.take(16 * kKiB);
  Block* fence2 = f.take(512);
  char* fit_address = fit->ptr;
  f.pool.give_back(big);
  f.pool.give_back(fit);
  Block* chosen = f.take(10 * kKiB);
  CHECK(chosen->ptr == fit_address);
  for (Block* b : {chosen, fence1, fence2}) f.pool.give_back(b);
}

TEST_CASE("freed neighbours merge back into one block, in any order") {
  Fixture f;
  Block* a = f.take(512 * kKiB);
  Block* b = f.take(512 * kKiB);
  Block* c = f.take(512 * kKiB);
  Block* d = f.take(512 * kKiB);  // the whole 2 MiB segment
  CHECK(d->next == nullptr);
  char* base = a->ptr;
  f.pool.give_back(a);
  f.pool.give_back(c);
  f.pool.give_back(b);  // joins a and c
  // Only a merged a+b+c (1.5 MiB) can hold 1 MiB; a lone piece is 512 KiB.
  Block* merged = f.take(kMiB);
  CHECK(merged->ptr == base);
  CHECK(f.source.acquires == 1);
  f.pool.give_back(d);
  f.pool.give_back(merged);  // the segment is whole again
  CHECK(f.pool.release_cached() == 2 * kMiB);
  CHECK(f.source.releases == 1);
  CHECK(f.stats.reserved_bytes == 0);
}

TEST_CASE("a large block splits only when the rest could serve another large request") {
  Fixture f;
  Block* unsplit = f.take(3 * kMiB);  // 4 MiB segment; a 1 MiB rest is too small to keep
  CHECK(unsplit->size == 4 * kMiB);
  CHECK(unsplit->next == nullptr);
  Block* ten = f.take(10 * kMiB);
  char* base = ten->ptr;
  f.pool.give_back(ten);
  Block* four = f.take(4 * kMiB);
  CHECK(four->ptr == base);
  CHECK(four->size == 4 * kMiB);
  Block* six = f.take(6 * kMiB);  // the rest of the 10 MiB block
  CHECK(six->ptr == base + 4 * kMiB);
  CHECK(f.source.acquires == 2);
  for (Block* b : {unsplit, four, six}) f.pool.give_back(b);
}

TEST_CASE("small and large requests never share a segment") {
  Fixture f;
  Block* large = f.take(10 * kMiB);
  char* large_address = large->ptr;
  f.pool.give_back(large);
  Block* small = f.take(1000);  // a 10 MiB free block exists, but it is for large requests
  CHECK(f.source.acquires == 2);
  CHECK(small->ptr != large_address);
  Block* large_again = f.take(2 * kMiB);
  CHECK(large_again->ptr == large_address);
  f.pool.give_back(small);
  f.pool.give_back(large_again);
}

TEST_CASE("a block freed on one stream is not handed to another") {
  Fixture f;
  Block* a = f.take(1000, kStreamA);
  char* address = a->ptr;
  f.pool.give_back(a);
  Block* b = f.take(1000, kStreamB);
  CHECK(b->ptr != address);
  CHECK(f.source.acquires == 2);
  Block* a_again = f.take(1000, kStreamA);
  CHECK(a_again->ptr == address);
  f.pool.give_back(b);
  f.pool.give_back(a_again);
}

TEST_CASE("release_cached returns only wholly free segments") {
  Fixture f;
  Block* kept = f.take(1000);    // segment 1 (small), stays in use
  Block* freed = f.take(4 * kMiB);  // segment 2 (large)
  f.pool.give_back(freed);
  CHECK(f.stats.reserved_bytes == 6 * kMiB);
  CHECK(f.pool.release_cached() == 4 * kMiB);
  CHECK(f.stats.reserved_bytes == 2 * kMiB);
  CHECK(f.stats.num_cuda_frees == 1);
  CHECK(f.source.held() == 2 * kMiB);
  CHECK_FALSE(f.pool.empty());
  f.pool.give_back(kept);
  CHECK(f.pool.release_cached() == 2 * kMiB);
  CHECK(f.pool.empty());
  CHECK(f.source.held() == 0);
}

TEST_CASE("usage counts segments, reserved, allocated and the largest free block") {
  Fixture f;
  CHECK(f.pool.usage().segments == 0);
  Block* small = f.take(1000);         // a 2 MiB small segment: 1 KiB in use
  Block* ten = f.take(10 * kMiB);      // a 10 MiB segment
  Block* head = f.take(3 * kMiB + 1);  // its own 4 MiB segment, whole (the rest is too small to keep)
  f.pool.give_back(ten);
  Block* four = f.take(4 * kMiB);  // the head of the freed 10 MiB block; 6 MiB stay free
  const PoolUsage u = f.pool.usage();
  CHECK(u.segments == 3);
  CHECK(u.reserved_bytes == f.stats.reserved_bytes);
  CHECK(u.reserved_bytes == 16 * kMiB);
  CHECK(u.allocated_bytes == f.stats.allocated_bytes);
  CHECK(u.allocated_bytes == 1024 + 4 * kMiB + 4 * kMiB);
  CHECK(u.largest_free_bytes == 6 * kMiB);
  for (Block* b : {small, head, four}) f.pool.give_back(b);
  CHECK(f.pool.usage().allocated_bytes == 0);
  CHECK(f.pool.usage().largest_free_bytes == 10 * kMiB);
}

TEST_CASE("a reserved segment serves the large requests that follow, one after another") {
  Fixture f;
  const size_t grad = 2 * kMiB + 256 * kKiB;  // alone, each would take a 4 MiB segment
  REQUIRE(f.pool.reserve(4 * grad, kStreamA));
  CHECK(f.stats.reserved_bytes == 10 * kMiB);  // 9 MiB, rounded to the segment granularity
  CHECK(f.stats.allocated_bytes == 0);
  std::vector<Block*> grads;
  for (int i = 0; i < 4; ++i) grads.push_back(f.take(grad));
  for (int i = 1; i < 4; ++i) CHECK(grads[i]->ptr == grads[0]->ptr + static_cast<size_t>(i) * grad);
  CHECK(grads[3]->size == grad + kMiB);  // the last keeps the 1 MiB rest, too small to split off
  CHECK(f.source.acquires == 1);
  CHECK_FALSE(f.pool.reserve(64 * kMiB, kStreamA));  // more than the source has left
  CHECK(f.source.acquires == 1);
  for (Block* b : grads) f.pool.give_back(b);
  CHECK(f.pool.release_cached() == 10 * kMiB);
}

TEST_CASE("an exhausted source gives nullptr and leaves the pool as it was") {
  Fixture f(4 * kMiB);
  Block* a = f.take(3 * kMiB);  // the whole 4 MiB
  CHECK(f.pool.take_new(round_block_size(3 * kMiB), kStreamA) == nullptr);
  CHECK(f.stats.reserved_bytes == 4 * kMiB);
  CHECK(f.stats.num_cuda_mallocs == 1);
  CHECK(f.stats.num_allocs == 1);
  // What the allocator does next: free, release the cache, retry.
  f.pool.give_back(a);
  CHECK(f.pool.take_new(round_block_size(3 * kMiB), kStreamA) == nullptr);
  f.pool.release_cached();
  Block* retry = f.pool.take_new(round_block_size(3 * kMiB), kStreamA);
  REQUIRE(retry != nullptr);
  f.pool.give_back(retry);
}

TEST_CASE("pass-through blocks are exact, never reused, and released on request") {
  Fixture f;
  Block* a = f.pool.take_exact(1000, kStreamA);
  REQUIRE(a != nullptr);
  CHECK(a->size == 1000);
  CHECK(f.stats.allocated_bytes == 1000);
  CHECK(f.stats.reserved_bytes == 1000);
  f.pool.give_back(a);
  CHECK(f.pool.take_cached(round_block_size(1000), kStreamA) == nullptr);
  CHECK(f.stats.reserved_bytes == 1000);  // retired, waiting for a safe cudaFree
  CHECK(f.pool.release_retired() == 1000);
  CHECK(f.stats.reserved_bytes == 0);
  CHECK(f.stats.num_cuda_mallocs == 1);
  CHECK(f.stats.num_cuda_frees == 1);
  CHECK(f.stats.cache_hits == 0);
  CHECK(f.pool.empty());
}
