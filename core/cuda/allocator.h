// File: core/cuda/allocator.h
// Loom's caching device allocator: every CUDA tensor's memory (and cuDNN's
// workspaces, through cuda::malloc_device) comes from here. Freed blocks are
// kept and handed out again, so a training step does no cudaMalloc/cudaFree
// once the first step has warmed the cache.
//
// - Sizes round up to 512 B. Requests up to 1 MiB share 2 MiB segments; larger
//   ones get segments in 2 MiB steps. The smallest cached block that fits is
//   used and split; a freed block merges with its free neighbours.
// - One general pool per GPU, and beside it a pool for long-lived state made
//   mid-run (Purpose::State in allocator_purpose.h: optimizer buffers), so that
//   state never pins the segments of a step's freed activations. Stream order: a
//   block is ordered on the calling thread's stream on its GPU (core/cuda/stream.h);
//   freed, it is reused by later work on that stream without synchronising, and
//   never by another stream. Memory used on a second stream must be synchronised
//   by its user before it is freed.
// - Out of memory: cached blocks go back to the driver and the cudaMalloc is
//   retried once; then OutOfMemoryError, after which the process goes on.
// - LOOM_CUDA_ALLOCATOR=passthrough (read at first use) or set_mode: every
//   allocation is its own cudaMalloc of the exact size, every free a cudaFree,
//   so compute-sanitizer memcheck sees true bounds.
// - CUDA graphs: see CaptureScope below.
// Thread-safe (one mutex).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/block_pool.h"
#include "core/capture_plan.h"

namespace loom::cuda {

// `bytes` on GPU `device`, aligned to 512 B; nullptr for 0 bytes. Throws
// DeviceError for a device that does not exist and OutOfMemoryError, with the
// sizes involved, when even an emptied cache leaves too little.
void* allocate(size_t bytes, int device);
// Called once per GPU, with the device, right after the first allocation on it,
// when its CUDA context exists: the cuDNN layer starts its warm-up there
// (core/cudnn/context.h). The hook must return quickly and never throw.
void set_first_allocation_hook(void (*hook)(int device));
// Returns `ptr` (from allocate; nullptr is ignored) for reuse on the current
// stream. A pointer the allocator did not hand out is a ValueError.
void deallocate(void* ptr);
// launch(scratch) with `bytes` of scratch on the current GPU (nullptr for 0),
// given back right after the launches: the allocator reuses it in stream order
// only, after the kernels that read it. Returns launch's status.
cudaError_t launch_with_scratch(size_t bytes, const std::function<cudaError_t(void* scratch)>& launch);

// A general-pool block freed during a capture counts as allocated (and is not
// yet in num_frees) until its capture pool is released. Without a device: every
// figure summed over the GPUs (on one GPU, that GPU's); with one: that GPU's
// (a DeviceError for a device that does not exist).
AllocatorStats stats();
AllocatorStats stats(int device);
// Sets the peaks to the current values, on every GPU.
void reset_peak_stats();
// Returns every wholly free cached segment to the driver, after the device has
// finished the work queued on it. Does nothing while any CaptureScope is open,
// since a cudaFree then could break the capture.
void empty_cache();

enum class AllocatorMode { Caching, Passthrough };
// Applies to later allocations; a block is always freed the way it was made.
void set_mode(AllocatorMode mode);
AllocatorMode mode();

// CUDA graphs. Memory a captured graph uses must never be handed to other work
// while the graph may still run. So, while a CaptureScope is open on the current
// stream, allocations there come from a private pool that belongs to the
// capture, blocks from that pool freed at any time go back to it only, and
// blocks from the general pool freed during the capture are held until the pool
// is released. Capture must use cudaStreamCaptureModeRelaxed: when the private
// pool has no fitting block the allocator calls cudaMalloc, which relaxed mode
// allows during capture (nothing is ever cudaFree'd while a scope is open).
//
//   cuda::CapturePoolId pool;
//   {
//     cuda::CaptureScope scope;  // on the stream about to be captured
//     LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
//     ... the step ...
//     LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
//     pool = scope.pool();
//   }
//   ... replay the graph ...
//   cudaGraphExecDestroy(exec); cudaGraphDestroy(graph);
//   cuda::release_capture_pool(pool);
//
// Allocating on a capturing stream outside a CaptureScope is a CudaError.
using CapturePoolId = uint64_t;

class CaptureScope {
 public:
  // Captures into a new private pool.
  CaptureScope();
  // Captures into an existing, unreleased pool, so that graphs which always run
  // one after another (a forward and its backward) can share memory.
  explicit CaptureScope(CapturePoolId pool);
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

  CapturePoolId pool() const { return pool_; }
  // Serves this capture's requests from one arena laid out by `plan` (from an
  // earlier capture of the same work's requests(), core/capture_plan.h), the
  // private pool taking what the plan does not place. Before the first
  // allocation of a new, unshared pool.
  void use_plan(CapturePlan plan);
  // The requests of the captures into this pool so far, in order: the record
  // the next capture of the same work is planned from.
  std::vector<CaptureRequest> requests() const;
  // Requests the plan sent to the pool (0 without a plan).
  int64_t plan_misses() const;

 private:
  cudaStream_t stream_;
  CapturePoolId pool_;
};

// Call once per CaptureScope that captured into `pool`, after its graph is
// destroyed and its last replay has finished. When the last one is released,
// the general-pool blocks the captures freed become reusable, and the private
// pool's memory goes back to the driver as its blocks are freed.
void release_capture_pool(CapturePoolId pool);

}  // namespace loom::cuda
