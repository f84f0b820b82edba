// File: tests/core/cuda/allocator_gpu_test.cc
// The caching device allocator on a real GPU: statistics, reuse without
// cudaMalloc, splitting and merging, empty_cache, out of memory and recovery,
// pass-through mode, the private pools of CUDA-graph captures, and the peak's
// breakdown by purpose.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdint>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/allocator_purpose.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

// The test GPU's index: these cases run with it current (tests:backend_device).
int gpu() { return testing::test_gpu().index; }

// Every case starts from an empty cache with fresh peaks and compares counters
// as differences from here. Nothing may be live: earlier cases free everything.
cuda::AllocatorStats fresh_stats() {
  cuda::synchronize();
  cuda::empty_cache();
  cuda::reset_peak_stats();
  cuda::AllocatorStats stats = cuda::stats();
  REQUIRE_MESSAGE(stats.allocated_bytes == 0, "an earlier case left device memory allocated");
  REQUIRE_MESSAGE(stats.reserved_bytes == 0, "empty_cache left segments reserved");
  return stats;
}

char* as_bytes(void* ptr) { return static_cast<char*>(ptr); }

bool overlaps(void* a, size_t a_bytes, void* b, size_t b_bytes) {
  return as_bytes(a) < as_bytes(b) + b_bytes && as_bytes(b) < as_bytes(a) + a_bytes;
}

class ModeGuard {
 public:
  explicit ModeGuard(cuda::AllocatorMode mode) : previous_(cuda::mode()) { cuda::set_mode(mode); }
  ~ModeGuard() { cuda::set_mode(previous_); }

 private:
  cuda::AllocatorMode previous_;
};

// A non-blocking stream of its own, current for the test's lifetime.
class SideStream {
 public:
  SideStream() : stream_(create()), guard_(stream_) {}
  ~SideStream() {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const { return stream_; }

 private:
  static cudaStream_t create() {
    cudaStream_t stream = nullptr;
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return stream;
  }
  cudaStream_t stream_;
  cuda::StreamGuard guard_;
};

}  // namespace

LOOM_GPU_TEST_CASE("allocated bytes return to zero, reserved bytes stay, peaks are tracked") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  cuda::AllocatorStats before = fresh_stats();
  void* small = cuda::allocate(1000, gpu());
  void* large = cuda::allocate(3 * kMiB, gpu());
  CHECK(reinterpret_cast<uintptr_t>(small) % cuda::kBlockGranularity == 0);
  cuda::AllocatorStats during = cuda::stats();
  // 1000 B rounds to 1 KiB in a 2 MiB segment; 3 MiB takes a whole 4 MiB segment.
  CHECK(during.allocated_bytes == kKiB + 4 * kMiB);
  CHECK(during.reserved_bytes == 2 * kMiB + 4 * kMiB);
  CHECK(during.num_allocs - before.num_allocs == 2);
  CHECK(during.num_cuda_mallocs - before.num_cuda_mallocs == 2);
  cuda::deallocate(small);
  cuda::deallocate(large);
  cuda::AllocatorStats after = cuda::stats();
  CHECK(after.allocated_bytes == 0);
  CHECK(after.reserved_bytes == during.reserved_bytes);
  CHECK(after.peak_allocated_bytes == during.allocated_bytes);
  CHECK(after.peak_reserved_bytes == during.reserved_bytes);
  CHECK(after.num_frees - before.num_frees == 2);
  CHECK(after.num_cuda_frees == before.num_cuda_frees);
  cuda::reset_peak_stats();
  CHECK(cuda::stats().peak_allocated_bytes == 0);
}

LOOM_GPU_TEST_CASE("the same size again is a cache hit: no cudaMalloc per step") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  cuda::AllocatorStats before = fresh_stats();
  void* first = cuda::allocate(5 * kMiB, gpu());
  cuda::deallocate(first);
  for (int step = 0; step < 10; ++step) {
    void* again = cuda::allocate(5 * kMiB, gpu());
    CHECK(again == first);
    cuda::deallocate(again);
  }
  cuda::AllocatorStats after = cuda::stats();
  CHECK(after.num_cuda_mallocs - before.num_cuda_mallocs == 1);
  CHECK(after.cache_hits - before.cache_hits == 10);
}

LOOM_GPU_TEST_CASE("tensor steps after the first one reuse cached memory and keep values") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  Generator gen(11);
  Tensor host = randn({4, 3, 17, 19}, {}, &gen);
  fresh_stats();
  cuda::AllocatorStats warm;
  for (int step = 0; step < 5; ++step) {
    if (step == 1) warm = cuda::stats();
    Tensor x = host.to(testing::test_gpu());
    Tensor nhwc = x.contiguous(MemoryFormat::ChannelsLast);
    Tensor filler = full({7, 1000}, 2.5, {.device = testing::test_gpu()});
    CHECK_CLOSE(nhwc.cpu(), host, 0, 0);
    CHECK(filler.at({6, 999}) == 2.5);
  }
  cuda::AllocatorStats after = cuda::stats();
  CHECK(after.num_cuda_mallocs == warm.num_cuda_mallocs);
  CHECK(after.cache_hits - warm.cache_hits >= 4 * 3);
  CHECK(after.allocated_bytes == 0);
}

LOOM_GPU_TEST_CASE("blocks split from one segment and merge back when freed") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  cuda::AllocatorStats before = fresh_stats();
  void* a = cuda::allocate(512 * kKiB, gpu());
  void* b = cuda::allocate(512 * kKiB, gpu());
  void* c = cuda::allocate(512 * kKiB, gpu());
  CHECK(as_bytes(b) == as_bytes(a) + 512 * kKiB);
  CHECK(as_bytes(c) == as_bytes(b) + 512 * kKiB);
  cuda::deallocate(a);
  cuda::deallocate(b);
  // Only the merged a+b holds 1 MiB; the segment's untouched rest is 512 KiB.
  void* merged = cuda::allocate(kMiB, gpu());
  CHECK(merged == a);
  CHECK(cuda::stats().num_cuda_mallocs - before.num_cuda_mallocs == 1);
  cuda::deallocate(merged);
  cuda::deallocate(c);
  cuda::empty_cache();  // succeeds only if the four pieces merged into the whole segment
  cuda::AllocatorStats after = cuda::stats();
  CHECK(after.reserved_bytes == 0);
  CHECK(after.num_cuda_frees - before.num_cuda_frees == 1);
}

LOOM_GPU_TEST_CASE("empty_cache returns reserved memory to the driver") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  cuda::AllocatorStats before = fresh_stats();
  std::vector<void*> blocks;
  for (size_t bytes : {size_t{100}, 300 * kKiB, 2 * kMiB, 9 * kMiB + 7}) {
    blocks.push_back(cuda::allocate(bytes, gpu()));
  }
  for (void* block : blocks) cuda::deallocate(block);
  cuda::AllocatorStats cached = cuda::stats();
  CHECK(cached.reserved_bytes == 2 * kMiB + 2 * kMiB + 10 * kMiB);
  cuda::empty_cache();
  cuda::AllocatorStats after = cuda::stats();
  CHECK(after.reserved_bytes == 0);
  CHECK(after.num_cuda_frees - before.num_cuda_frees == 3);
  CHECK(after.peak_reserved_bytes == cached.reserved_bytes);
}

LOOM_GPU_TEST_CASE("an impossible allocation is a typed error and the process goes on") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  fresh_stats();
  size_t huge = size_t{1} << 40;
  CHECK_THROWS_WITH_FRAGMENT(cuda::allocate(huge, gpu()), OutOfMemoryError,
                             "tried to allocate 1099511627776 bytes (1.00 TiB) on " +
                                 testing::test_gpu().str());
  CHECK_THROWS_WITH_FRAGMENT(cuda::allocate(huge, gpu()), OutOfMemoryError, "reserved from the driver");
  CHECK(cudaGetLastError() == cudaSuccess);  // the failed cudaMalloc left no error behind
  // 2^40 floats through a tensor: 4 TiB.
  CHECK_THROWS_WITH_FRAGMENT(empty({int64_t{1} << 40}, {.device = testing::test_gpu()}),
                             OutOfMemoryError, "4398046511104 bytes");
  Tensor after = ones({1024}, {.device = testing::test_gpu()});
  CHECK(after.at({1023}) == 1.0);
  CHECK(cuda::stats().allocated_bytes == 4 * kKiB);
}

LOOM_GPU_TEST_CASE("out of memory at half the free memory twice, then free and retry") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  fresh_stats();
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  LOOM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // A little over half, so that two never fit whatever the rounding.
  size_t half = free_bytes / 2 + cuda::kSegmentGranularity;
  void* a = cuda::allocate(half, gpu());
  CHECK_THROWS_WITH_FRAGMENT(cuda::allocate(half, gpu()), OutOfMemoryError, "free of");
  cuda::deallocate(a);
  cuda::AllocatorStats cached = cuda::stats();
  void* b = cuda::allocate(half, gpu());  // a's cached block, no cudaMalloc
  CHECK(b == a);
  CHECK(cuda::stats().num_cuda_mallocs == cached.num_cuda_mallocs);
  cuda::deallocate(b);
  // Bigger than the cached block: the first cudaMalloc fails while a's segment is
  // cached, so the allocator must give it back and retry.
  void* c = cuda::allocate(half + 64 * kMiB, gpu());
  CHECK(c != nullptr);
  cuda::AllocatorStats after = cuda::stats();
  CHECK(after.num_cuda_frees - cached.num_cuda_frees == 1);
  CHECK(after.num_cuda_mallocs - cached.num_cuda_mallocs == 1);
  LOOM_CUDA_CHECK(cudaMemsetAsync(c, 0, half + 64 * kMiB, cuda::current_stream()));
  cuda::synchronize();
  cuda::deallocate(c);
  cuda::empty_cache();
}

LOOM_GPU_TEST_CASE("pass-through mode makes one cudaMalloc and one cudaFree per block") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // whatever LOOM_CUDA_ALLOCATOR says
  cuda::AllocatorStats before = fresh_stats();
  void* cached_block = cuda::allocate(1000, gpu());  // made while caching: freed into the cache
  ModeGuard mode(cuda::AllocatorMode::Passthrough);
  void* a = cuda::allocate(1000, gpu());
  cuda::AllocatorStats during = cuda::stats();
  CHECK(during.allocated_bytes == kKiB + 1000);  // exact size, no rounding
  CHECK(during.reserved_bytes == 2 * kMiB + 1000);
  cuda::deallocate(a);
  cuda::deallocate(cached_block);
  void* b = cuda::allocate(1000, gpu());
  cuda::deallocate(b);
  Tensor x = arange(int64_t{1000}).to(testing::test_gpu());
  CHECK_CLOSE(x.cpu(), arange(int64_t{1000}), 0, 0);
  x = Tensor();
  cuda::AllocatorStats after = cuda::stats();
  CHECK(after.num_cuda_mallocs - before.num_cuda_mallocs == 4);  // cached_block's segment, a, b, x
  CHECK(after.num_cuda_frees - before.num_cuda_frees == 3);       // a, b, x; not the cached one
  CHECK(after.cache_hits == before.cache_hits);
  CHECK(after.reserved_bytes == 2 * kMiB);
  CHECK(after.allocated_bytes == 0);
}

LOOM_GPU_TEST_CASE("a pointer the allocator did not hand out is a ValueError") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  fresh_stats();
  int host_value = 0;
  CHECK_THROWS_WITH_FRAGMENT(cuda::deallocate(&host_value), ValueError, "not a live allocation");
  void* block = cuda::allocate(64, gpu());
  cuda::deallocate(block);
  CHECK_THROWS_WITH_FRAGMENT(cuda::deallocate(block), ValueError, "freed twice");
}

LOOM_GPU_TEST_CASE("memory freed during a capture is never handed to eager allocations") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  cuda::AllocatorStats base = fresh_stats();
  SideStream side;
  void* eager = cuda::allocate(kMiB, gpu());  // general pool; freed inside the capture
  void* temp = nullptr;
  void* out = nullptr;
  cudaGraph_t graph = nullptr;
  cuda::CapturePoolId pool = 0;
  {
    cuda::CaptureScope scope;
    LOOM_CUDA_CHECK(cudaStreamBeginCapture(side.get(), cudaStreamCaptureModeRelaxed));
    temp = cuda::allocate(kMiB, gpu());
    LOOM_CUDA_CHECK(cudaMemsetAsync(temp, 1, kMiB, side.get()));
    cuda::deallocate(temp);
    void* again = cuda::allocate(kMiB, gpu());
    CHECK(again == temp);  // reused inside the capture, in stream order
    LOOM_CUDA_CHECK(cudaMemsetAsync(again, 2, kMiB, side.get()));
    cuda::deallocate(again);
    out = cuda::allocate(4 * kKiB, gpu());  // the graph's output, kept after capture
    LOOM_CUDA_CHECK(cudaMemsetAsync(out, 0x7f, 4 * kKiB, side.get()));
    cuda::deallocate(eager);
    LOOM_CUDA_CHECK(cudaStreamEndCapture(side.get(), &graph));
    pool = scope.pool();
  }
  REQUIRE(graph != nullptr);
  cudaGraphExec_t exec = nullptr;
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  LOOM_CUDA_CHECK(cudaGraphLaunch(exec, side.get()));
  std::vector<unsigned char> host(4 * kKiB);
  cuda::copy_to_host(host.data(), out, host.size());
  CHECK(host == std::vector<unsigned char>(4 * kKiB, 0x7f));

  // Eager work of the same sizes gets neither the private pool's blocks nor the
  // eager block the capture freed (an allocator that cached them would return them).
  std::vector<void*> eager_blocks;
  for (int i = 0; i < 3; ++i) eager_blocks.push_back(cuda::allocate(kMiB, gpu()));
  for (void* block : eager_blocks) {
    CHECK_FALSE(overlaps(block, kMiB, temp, kMiB));
    CHECK_FALSE(overlaps(block, kMiB, eager, kMiB));
  }
  for (void* block : eager_blocks) cuda::deallocate(block);

  LOOM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LOOM_CUDA_CHECK(cudaGraphDestroy(graph));
  cuda::deallocate(out);  // back to the private pool, not the general one
  cuda::AllocatorStats held = cuda::stats();
  CHECK(held.allocated_bytes == kMiB);  // the eager block, held for the graph
  cuda::release_capture_pool(pool);
  cuda::AllocatorStats released = cuda::stats();
  CHECK(released.allocated_bytes == 0);
  CHECK(released.num_cuda_frees - held.num_cuda_frees == 1);  // the private 2 MiB segment
  CHECK(held.reserved_bytes - released.reserved_bytes == 2 * kMiB);
  CHECK_THROWS_WITH_FRAGMENT(cuda::release_capture_pool(pool), ValueError, "no such pool");
  cuda::empty_cache();
  CHECK(cuda::stats().reserved_bytes == base.reserved_bytes);
}

// Two freed 128 MiB blocks cannot hold a 256 MiB one in a caching pool; a plan
// from the first capture's record puts all three in one 256 MiB arena, and
// leaves the block that outlives the capture to the pool.
LOOM_GPU_TEST_CASE("a planned capture serves its requests from one arena laid out by the last one's record") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // pass-through mode keeps exact blocks: no arena
  const cuda::AllocatorStats base = fresh_stats();
  auto work = [] {
    void* a = cuda::allocate(128 * kMiB, gpu());
    void* b = cuda::allocate(128 * kMiB, gpu());
    cuda::deallocate(a);
    cuda::deallocate(b);
    void* c = cuda::allocate(256 * kMiB, gpu());
    void* out = cuda::allocate(4 * kKiB, gpu());  // outlives the capture, as a graph's output
    cuda::deallocate(c);
    return std::vector<void*>{a, c, out};
  };
  std::vector<cuda::CaptureRequest> record;
  std::vector<void*> first, second;
  cuda::CapturePoolId first_pool = 0, second_pool = 0;
  {
    cuda::CaptureScope scope;
    first = work();
    record = scope.requests();
    first_pool = scope.pool();
    CHECK(scope.plan_misses() == 0);
  }
  REQUIRE(record.size() == 4);
  CHECK(cuda::stats().reserved_bytes - base.reserved_bytes == 514 * kMiB);  // 128 + 128 + 256 + a small segment
  const size_t before = cuda::stats().reserved_bytes;
  {
    cuda::CaptureScope scope;
    scope.use_plan(cuda::CapturePlan(record));
    CHECK_THROWS_WITH_FRAGMENT(scope.use_plan(cuda::CapturePlan(record)), ValueError, "a capture plan goes to a new");
    second = work();
    CHECK(scope.plan_misses() == 0);
    second_pool = scope.pool();
  }
  CHECK(cuda::stats().reserved_bytes - before == 258 * kMiB);  // the arena, and a small segment for the output
  CHECK(second[0] == second[1]);  // c where a was
  cuda::deallocate(first[2]);
  cuda::release_capture_pool(first_pool);
  cuda::release_capture_pool(second_pool);
  // The output lives on in its small segment; the released graph's arena held
  // nothing it had to keep and is gone.
  CHECK(cuda::stats().reserved_bytes - base.reserved_bytes == 2 * kMiB);
  cuda::deallocate(second[2]);
  CHECK(cuda::stats().allocated_bytes == base.allocated_bytes);
  cuda::empty_cache();
  CHECK(cuda::stats().reserved_bytes == base.reserved_bytes);
}

LOOM_GPU_TEST_CASE("a planned capture's large outliving blocks are cut from one segment reserved for them") {
  ModeGuard caching(cuda::AllocatorMode::Caching);
  const cuda::AllocatorStats base = fresh_stats();
  const size_t grad = 2 * kMiB + 256 * kKiB;  // in a segment of its own: 4 MiB each
  auto work = [grad] {
    std::vector<void*> grads;
    void* t = cuda::allocate(32 * kMiB, gpu());  // an activation, freed within the capture
    for (int i = 0; i < 4; ++i) grads.push_back(cuda::allocate(grad, gpu()));  // gradients: they outlive it
    cuda::deallocate(t);
    return grads;
  };
  std::vector<cuda::CaptureRequest> record;
  std::vector<void*> first, second;
  cuda::CapturePoolId first_pool = 0, second_pool = 0;
  {
    cuda::CaptureScope scope;
    first = work();
    record = scope.requests();
    first_pool = scope.pool();
  }
  CHECK(cuda::stats().reserved_bytes - base.reserved_bytes == 32 * kMiB + 4 * 4 * kMiB);
  for (void* g : first) cuda::deallocate(g);
  cuda::release_capture_pool(first_pool);
  CHECK(cuda::stats().reserved_bytes == base.reserved_bytes);
  {
    cuda::CaptureScope scope;
    scope.use_plan(cuda::CapturePlan(record));
    second = work();
    CHECK(scope.plan_misses() == 0);
    second_pool = scope.pool();
  }
  // The arena, and 9 MiB of gradients in one 10 MiB segment, one after another.
  CHECK(cuda::stats().reserved_bytes - base.reserved_bytes == 32 * kMiB + 10 * kMiB);
  for (int i = 1; i < 4; ++i) CHECK(as_bytes(second[i]) == as_bytes(second[0]) + static_cast<size_t>(i) * grad);
  cuda::release_capture_pool(second_pool);  // the arena goes; the gradients' segment stays with them
  CHECK(cuda::stats().reserved_bytes - base.reserved_bytes == 10 * kMiB);
  for (void* g : second) cuda::deallocate(g);
  CHECK(cuda::stats().allocated_bytes == base.allocated_bytes);
  CHECK(cuda::stats().reserved_bytes == base.reserved_bytes);
}

LOOM_GPU_TEST_CASE("allocating on a capturing stream outside a CaptureScope is refused") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  fresh_stats();
  SideStream side;
  void* scratch = cuda::allocate(1024, gpu());  // gives the graph one node
  cuda::AllocatorStats before = cuda::stats();
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(side.get(), cudaStreamCaptureModeRelaxed));
  LOOM_CUDA_CHECK(cudaMemsetAsync(scratch, 0, 1024, side.get()));
  CHECK_THROWS_WITH_FRAGMENT(cuda::allocate(1024, gpu()), CudaError, "outside a cuda::CaptureScope");
  cudaGraph_t graph = nullptr;
  LOOM_CUDA_CHECK(cudaStreamEndCapture(side.get(), &graph));
  LOOM_CUDA_CHECK(cudaGraphDestroy(graph));
  CHECK(cuda::stats().num_allocs == before.num_allocs);
  cuda::deallocate(scratch);
}

LOOM_GPU_TEST_CASE("a capture pool is shared between scopes and released once per scope") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // these check caching itself
  fresh_stats();
  cuda::CapturePoolId pool = 0;
  void* first = nullptr;
  {
    cuda::CaptureScope scope;
    pool = scope.pool();
    CHECK_THROWS_WITH_FRAGMENT(cuda::CaptureScope(), ValueError, "do not nest");
    CHECK_THROWS_WITH_FRAGMENT(cuda::release_capture_pool(pool), ValueError, "still open");
    first = cuda::allocate(kMiB, gpu());
    cuda::deallocate(first);
    CHECK(cuda::stats().reserved_bytes == 2 * kMiB);
    cuda::empty_cache();  // refused while a scope is open
    CHECK(cuda::stats().reserved_bytes == 2 * kMiB);
  }
  {
    cuda::CaptureScope shared(pool);
    void* again = cuda::allocate(kMiB, gpu());
    CHECK(again == first);
    cuda::deallocate(again);
  }
  cuda::release_capture_pool(pool);  // the first graph; the second still uses the pool
  void* eager = cuda::allocate(kMiB, gpu());
  CHECK_FALSE(overlaps(eager, kMiB, first, kMiB));
  cuda::deallocate(eager);
  cuda::AllocatorStats before_last = cuda::stats();
  cuda::release_capture_pool(pool);
  CHECK(cuda::stats().num_cuda_frees - before_last.num_cuda_frees == 1);
  CHECK_THROWS_WITH_FRAGMENT(cuda::CaptureScope(pool), ValueError, "was released");
  CHECK_THROWS_WITH_FRAGMENT(cuda::release_capture_pool(pool), ValueError, "no such pool");
}

// Nothing goes back to the driver while a capture runs: a pool whose graphs were
// all released during another capture goes back as soon as that capture ends.
LOOM_GPU_TEST_CASE("a pool released during another capture goes back to the driver when that capture ends") {
  ModeGuard caching(cuda::AllocatorMode::Caching);
  const cuda::AllocatorStats base = fresh_stats();
  cuda::CapturePoolId first = 0;
  {
    cuda::CaptureScope scope;
    first = scope.pool();
    cuda::deallocate(cuda::allocate(kMiB, gpu()));
  }
  CHECK(cuda::stats().reserved_bytes - base.reserved_bytes == 2 * kMiB);
  cuda::CapturePoolId second = 0;
  {
    SideStream side;  // another stream's capture, as another thread's TrainStep would make
    cuda::CaptureScope scope;
    second = scope.pool();
    cuda::release_capture_pool(first);
    CHECK(cuda::stats().reserved_bytes - base.reserved_bytes == 2 * kMiB);  // kept while it runs
  }
  CHECK(cuda::stats().reserved_bytes == base.reserved_bytes);
  cuda::release_capture_pool(second);
  CHECK(cuda::stats().reserved_bytes == base.reserved_bytes);
}

LOOM_GPU_TEST_CASE("the peak is broken down by purpose: what was live at it, and each one's own peak") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // whole MiB blocks, no rounding to think about
  fresh_stats();
  using cuda::Purpose;
  void* tensor = cuda::allocate(2 * kMiB, gpu());
  void* workspace = nullptr;
  void* scratch = nullptr;
  {
    cuda::PurposeScope purpose(Purpose::Workspace);
    workspace = cuda::allocate(kMiB, gpu());
  }
  {
    cuda::PurposeScope purpose(Purpose::PlanTests);
    scratch = cuda::allocate(4 * kMiB, gpu());  // whole 2 MiB steps: the block is the request
  }
  cuda::deallocate(scratch);                   // the peak was 7 MiB: 2 + 1 + 4
  void* later = cuda::allocate(kMiB, gpu());  // the thread's purpose is back to tensors
  cuda::MemoryBreakdown m = cuda::memory_breakdown(gpu());
  CHECK(m.at_peak[Purpose::Tensors] == 2 * kMiB);
  CHECK(m.at_peak[Purpose::Workspace] == kMiB);
  CHECK(m.at_peak[Purpose::PlanTests] == 4 * kMiB);
  CHECK(m.at_peak[Purpose::CapturePools] == 0);
  CHECK(m.high_water[Purpose::Tensors] == 3 * kMiB);  // reached after the peak
  CHECK(m.high_water[Purpose::PlanTests] == 4 * kMiB);

  cuda::CapturePoolId pool = 0;
  {
    cuda::CaptureScope scope;
    cuda::PurposeScope purpose(Purpose::Workspace);  // a capture's blocks count as its pool's
    void* captured = cuda::allocate(8 * kMiB, gpu());
    cuda::deallocate(captured);
    pool = scope.pool();
  }
  cuda::release_capture_pool(pool);
  m = cuda::memory_breakdown(gpu());  // a new peak, 12 MiB: 3 + 1 + 8
  CHECK(m.at_peak[Purpose::Tensors] == 3 * kMiB);
  CHECK(m.at_peak[Purpose::Workspace] == kMiB);
  CHECK(m.at_peak[Purpose::PlanTests] == 0);
  CHECK(m.at_peak[Purpose::CapturePools] == 8 * kMiB);
  CHECK(m.high_water[Purpose::CapturePools] == 8 * kMiB);

  cuda::reset_peak_stats();  // both views start again from what is live
  m = cuda::memory_breakdown(gpu());
  CHECK(m.at_peak[Purpose::CapturePools] == 0);
  CHECK(m.high_water[Purpose::PlanTests] == 0);
  CHECK(m.high_water[Purpose::Tensors] == 3 * kMiB);
  CHECK(cuda::purpose_name(Purpose::PlanTests) == "plan tests");

  // A general-pool block freed during a capture stays allocated, as held by
  // captures, until the capture's pool is released.
  void* old = cuda::allocate(2 * kMiB, gpu());
  cuda::CapturePoolId holder = 0;
  {
    cuda::CaptureScope scope;
    cuda::deallocate(old);
    holder = scope.pool();
  }
  cuda::reset_peak_stats();
  m = cuda::memory_breakdown(gpu());
  CHECK(m.high_water[Purpose::HeldByCaptures] == 2 * kMiB);
  CHECK(m.high_water[Purpose::Tensors] == 3 * kMiB);  // no longer counted as a tensor
  cuda::release_capture_pool(holder);
  cuda::reset_peak_stats();
  m = cuda::memory_breakdown(gpu());
  CHECK(m.high_water[Purpose::HeldByCaptures] == 0);
  CHECK(cuda::purpose_name(Purpose::HeldByCaptures) == "held by captures");
  cuda::deallocate(later);
  cuda::deallocate(workspace);
  cuda::deallocate(tensor);
}

LOOM_GPU_TEST_CASE("state blocks come from segments of their own, never from a freed tensor's hole") {
  ModeGuard caching(cuda::AllocatorMode::Caching);  // whole MiB blocks, no rounding to think about
  const cuda::AllocatorStats before = fresh_stats();
  using cuda::Purpose;
  void* activation = cuda::allocate(16 * kMiB, gpu());  // a step's activation, then freed
  cuda::deallocate(activation);
  void* state = nullptr;
  {
    cuda::PurposeScope purpose(Purpose::State);  // an optimizer's buffer, made after it
    state = cuda::allocate(4 * kMiB, gpu());
  }
  CHECK_FALSE(overlaps(state, 4 * kMiB, activation, 16 * kMiB));
  void* tensor = cuda::allocate(4 * kMiB, gpu());  // a tensor still reuses the hole
  CHECK(tensor == activation);
  cuda::deallocate(tensor);
  cuda::empty_cache();  // the activation's segment goes back whole; the state's stays
  CHECK(cuda::stats().reserved_bytes == 4 * kMiB);
  const std::vector<cuda::NamedPoolUsage> pools = cuda::pool_usage(gpu());
  REQUIRE(pools.size() >= 2);
  CHECK(pools[0].name == "general");
  CHECK(pools[0].usage.segments == 0);
  CHECK(pools[1].name == "state");
  CHECK(pools[1].usage.segments == 1);
  CHECK(pools[1].usage.allocated_bytes == 4 * kMiB);
  CHECK(cuda::memory_breakdown(gpu()).high_water[Purpose::State] == 4 * kMiB);
  CHECK(cuda::purpose_name(Purpose::State) == "state");
  void* again = nullptr;
  {
    cuda::PurposeScope purpose(Purpose::State);
    cuda::deallocate(state);
    again = cuda::allocate(4 * kMiB, gpu());  // a freed state block serves the next state request
  }
  CHECK(again == state);
  cuda::deallocate(again);
  cuda::empty_cache();
  const cuda::AllocatorStats after = cuda::stats();
  CHECK(after.reserved_bytes == 0);
  CHECK(after.num_cuda_frees - before.num_cuda_frees == 2);
}

LOOM_GPU_TEST_CASE("reserve_state cuts the large state buffers of one call from one segment") {
  ModeGuard caching(cuda::AllocatorMode::Caching);
  const cuda::AllocatorStats before = fresh_stats();
  // Three of resnet34's 3x3x256x256 fp32 weights' buffers and a small one; a
  // segment each would be 4 MiB per large buffer, 14 MiB in all.
  const std::vector<size_t> sizes = {9 * kMiB / 4, 9 * kMiB / 4, 9 * kMiB / 4, kMiB / 2, 0};
  cuda::reserve_state(gpu(), sizes);
  std::vector<void*> blocks;
  {
    cuda::PurposeScope purpose(cuda::Purpose::State);
    for (size_t size : sizes) {
      if (size > 0) blocks.push_back(cuda::allocate(size, gpu()));
    }
  }
  const cuda::PoolUsage state = cuda::pool_usage(gpu()).at(1).usage;
  CHECK(state.segments == 2);                       // 6.75 MiB rounded up to 8, and a small segment
  CHECK(state.reserved_bytes == 10 * kMiB);
  CHECK(cuda::stats().num_cuda_mallocs - before.num_cuda_mallocs == 2);
  CHECK(static_cast<char*>(blocks[1]) == static_cast<char*>(blocks[0]) + 9 * kMiB / 4);
  for (void* block : blocks) cuda::deallocate(block);
  cuda::reserve_state(gpu(), sizes);  // the freed segment is large enough: nothing more is reserved
  CHECK(cuda::pool_usage(gpu()).at(1).usage.reserved_bytes == 10 * kMiB);
  cuda::empty_cache();
  CHECK(cuda::stats().reserved_bytes == 0);
}

#endif  // LOOM_WITH_CUDA
