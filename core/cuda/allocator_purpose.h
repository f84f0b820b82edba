// File: core/cuda/allocator_purpose.h
// What the caching allocator's memory is for: every live block is counted
// under one purpose (tensors, cuDNN/cuBLAS workspaces, test runs' included, the
// scratch copies of plan test runs' operands, CUDA-graph capture pools,
// blocks that were freed during a capture and are held for its graph, and
// long-lived state), so a
// configuration's peak can be broken down: what was live at the moment of the
// peak, and each purpose's own high-water mark. bench/train_step prints both
// for every GPU configuration.
//
//   {
//     cuda::PurposeScope purpose(cuda::Purpose::PlanTests);  // this thread's allocations
//     void* scratch = cuda::malloc_device(bytes, device);
//   }
//   cuda::MemoryBreakdown m = cuda::memory_breakdown(device);
//   m.at_peak[cuda::Purpose::Workspace];  // bytes of workspace live at the peak
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/block_pool.h"

namespace loom::cuda {

// A block allocated while a CaptureScope is open on its stream counts as
// CapturePools whatever the thread's purpose. A general-pool block freed during
// a capture moves to HeldByCaptures until the capture's pool is released
// (allocator.h): memory that a step freeing its old tensors inside the capture,
// rather than before it, keeps for as long as the graph lives.
//
// State is memory made mid-run that lives as long as the run (an optimizer's
// buffers, made at its first step; a captured step's input slots). Its blocks
// come from segments of their own (a second pool per GPU): cut from the holes
// that a step's freed activations leave, as Tensors blocks would be, each would
// keep a whole segment from going back to the driver (SGD's momentum held
// 101 MiB of such holes in resnet34_cifar's captured step, batch 128, bf16).
enum class Purpose : uint8_t { Tensors, Workspace, PlanTests, CapturePools, HeldByCaptures, State };
constexpr size_t kPurposeCount = 6;

std::string_view purpose_name(Purpose purpose);  // "tensors", "workspace", ..., "held by captures", "state"

// Sets the calling thread's purpose (Tensors by default) for its lifetime.
class PurposeScope {
 public:
  explicit PurposeScope(Purpose purpose);
  ~PurposeScope();
  PurposeScope(const PurposeScope&) = delete;
  PurposeScope& operator=(const PurposeScope&) = delete;

 private:
  Purpose previous_;
};

struct PurposeBytes {
  std::array<size_t, kPurposeCount> bytes{};
  size_t operator[](Purpose p) const { return bytes[static_cast<size_t>(p)]; }
  size_t& operator[](Purpose p) { return bytes[static_cast<size_t>(p)]; }
};

struct MemoryBreakdown {
  PurposeBytes at_peak;     // live blocks per purpose when allocated bytes last reached the peak
  PurposeBytes high_water;  // each purpose's own peak since the last reset_peak_stats()
};

// The breakdown on GPU `device` (a DeviceError for one that does not exist);
// reset_peak_stats() resets it with the peaks.
MemoryBreakdown memory_breakdown(int device);

// Where the reserved bytes are now: the general pool's usage, the state pool's,
// then each capture pool's on `device` (a capture's planned arena counts as one allocated block),
// so that bytes reserved but not allocated can be told apart by pool.
struct NamedPoolUsage {
  std::string name;  // "general", "state", "capture 3"
  PoolUsage usage;
};
std::vector<NamedPoolUsage> pool_usage(int device);

// Readies `device`'s state pool for long-lived buffers of `sizes` bytes about to be allocated
// under Purpose::State: one segment for all the large ones (over kSmallLimit), which a segment
// each would round up to the segment granularity one by one (21 of resnet34's 88 MiB of momentum).
// Nothing happens when the pool already has a free block that large, in pass-through mode, or
// when the driver is out of memory (the buffers then get segments of their own).
void reserve_state(int device, std::span<const size_t> sizes);

}  // namespace loom::cuda
