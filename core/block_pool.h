// File: core/block_pool.h
// The bookkeeping half of the CUDA caching allocator (core/cuda/allocator.h):
// segments taken from a source, carved into blocks, cached when freed, merged
// with their free neighbours and handed back to the source on request. It makes
// no CUDA call itself (the source does), so it builds and is tested everywhere,
// the CPU-only build included.
//
//   SegmentSource& source = ...;           // cudaMalloc / cudaFree, or a fake
//   AllocatorStats stats;
//   BlockPool pool(source, stats);
//   size_t size = round_block_size(1000);  // 1024
//   Block* b = pool.take_cached(size, stream);
//   if (b == nullptr) b = pool.take_new(size, stream);  // nullptr: out of memory
//   ... use b->ptr on `stream` ...
//   pool.give_back(b);  // cached: the next take on `stream` may reuse it at once
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

namespace loom::cuda {

// Block sizes are multiples of 512 B, so every block is aligned for any dtype
// and for vector loads.
constexpr size_t kBlockGranularity = 512;
// Requests up to 1 MiB are small: they share 2 MiB segments, apart from the
// large ones, so that many small tensors do not fragment big segments.
constexpr size_t kSmallLimit = size_t{1} << 20;
// Segments come from the driver in multiples of 2 MiB (its page size for large
// allocations).
constexpr size_t kSegmentGranularity = size_t{2} << 20;

// The largest request the size arithmetic below handles without overflow; far
// beyond any device, so the allocator reports anything bigger as out of memory.
constexpr size_t kMaxRequest = size_t{1} << 62;

// `bytes` (at most kMaxRequest) rounded up to the block granularity, at least one granule.
size_t round_block_size(size_t bytes);
// Bytes of the segment a new block of `block_size` (already rounded) is cut from.
size_t segment_size_for(size_t block_size);

// Opaque identity of the stream a block is ordered on (a cudaStream_t's value).
using StreamId = const void*;

// Process-wide counters; "cuda" counts are segment acquires and releases.
struct AllocatorStats {
  size_t allocated_bytes = 0;  // in blocks handed out and not yet given back
  size_t reserved_bytes = 0;   // in segments held from the driver
  size_t peak_allocated_bytes = 0;
  size_t peak_reserved_bytes = 0;
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
  uint64_t num_cuda_mallocs = 0;
  uint64_t num_cuda_frees = 0;
  uint64_t cache_hits = 0;  // allocations served from cached blocks
};

// What one pool holds now: its segments, their bytes, and how much of them is free.
struct PoolUsage {
  size_t segments = 0;
  size_t reserved_bytes = 0;      // in its segments
  size_t allocated_bytes = 0;     // in its blocks handed out
  size_t largest_free_bytes = 0;  // its largest cached block
};

// Where segments come from. acquire returns nullptr when the device is out of
// memory (and leaves no error behind); any other failure throws.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  virtual void* acquire(size_t bytes) = 0;
  virtual void release(void* base, size_t bytes) = 0;
};

// A run of bytes inside one segment. A segment is a chain of blocks in address
// order; its first block is never merged away, so it names the segment.
struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  StreamId stream = nullptr;  // all blocks of a segment share it
  Block* prev = nullptr;      // neighbours in the same segment
  Block* next = nullptr;
  bool small = false;      // cut from a small-request segment
  bool exact = false;      // pass-through: a segment of its own, never cached
  bool allocated = false;
};

// One pool of segments: the general pool of a device, or the private pool of a
// CUDA-graph capture. A block freed on a stream may be handed out again at once
// to later work on that same stream (stream order makes that safe); it is never
// handed to another stream. Not thread-safe: the allocator locks around it.
class BlockPool {
 public:
  BlockPool(SegmentSource& source, AllocatorStats& stats);
  // Deletes the block records; segments still held are the owner's to release first.
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // The smallest cached block of at least `size` (rounded) on `stream`, split
  // when the rest is worth keeping; nullptr when none fits.
  Block* take_cached(size_t size, StreamId stream);
  // A block cut from a new segment; nullptr when the source is out of memory.
  Block* take_new(size_t size, StreamId stream);
  // A block of exactly `bytes` in a segment of its own (pass-through mode), so
  // that a memory checker sees the true bounds; nullptr when out of memory.
  Block* take_exact(size_t bytes, StreamId stream);
  // Adds a free segment of `bytes` (over kSmallLimit), rounded up to the segment
  // granularity, that the large requests on `stream` which follow are cut from
  // one after another, best fit as ever, rather than each from a segment of its
  // own; false (and nothing added) when the source is out of memory.
  bool reserve(size_t bytes, StreamId stream);
  // Frees `block`: cached and merged with its free neighbours, or, if exact,
  // retired until release_retired.
  void give_back(Block* block);

  // Returns every wholly free segment, cached or retired, to the source. The
  // caller makes sure no queued work still uses them. Returns the bytes released.
  size_t release_cached();
  size_t release_retired();

  // Its segments and blocks now (a walk over every block: for reports, not hot paths).
  PoolUsage usage() const;

  // True when the pool holds no segment at all.
  bool empty() const { return segments_.empty(); }

 private:
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BySize>;

  FreeSet& free_set(const Block* block) { return block->small ? small_free_ : large_free_; }
  Block* add_segment(size_t bytes, StreamId stream, bool small, bool exact);
  size_t forget_segment(Block* head);
  Block* split(Block* block, size_t size);
  void absorb_next(Block* block);
  Block* hand_out(Block* block);

  SegmentSource& source_;
  AllocatorStats& stats_;
  FreeSet small_free_;
  FreeSet large_free_;
  std::set<Block*> segments_;    // first blocks
  std::vector<Block*> retired_;  // freed exact blocks
};

}  // namespace loom::cuda
