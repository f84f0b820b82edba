// File: core/storage.cc
// Refcounted memory on one device: allocation on that device and release.
#include "core/storage.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "core/block_pool.h"
#include "core/error.h"
#include "core/storage_stats.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/allocator.h"
#endif

namespace loom {

namespace {

// One counter per DeviceType: CPU, CUDA.
std::atomic<size_t> bytes_in_use[2];

std::atomic<size_t>& counter(DeviceType type) { return bytes_in_use[static_cast<int>(type)]; }

constexpr size_t kCpuAlignment = 64;  // a cache line; also what AVX-512 loads like

// A tensor with no elements still promises a usable device.
void check_device(Device device) {
  if (device.is_cpu()) return;
  LOOM_CHECK(cuda_built(), DeviceError,
             "[storage] cannot place a tensor on {}: this build of Loom has no CUDA backend "
             "(build where /usr/local/cuda exists, without --config=cpu)",
             device.str());
  int count = cuda_device_count();
  LOOM_CHECK(count > 0, DeviceError,
             "[storage] no CUDA GPU is usable on this machine; create tensors on Device::cpu()");
  LOOM_CHECK(device.index >= 0 && device.index < count, DeviceError,
             "[storage] device {} does not exist ({} GPU(s) visible)", device.str(), count);
}

// A CPU training step frees and allocates the same large buffers every step.
// glibc would map each one afresh (32 MiB and below once its adaptive threshold
// has grown; larger ones always) and trim the heap's top, so every step paid page
// faults and the kernel's zeroing of new pages. Blocks up to 32 MiB (glibc's
// largest threshold) stay in the heap, and the heap is trimmed only past 1 GiB free.
constexpr size_t kHeapLimit = size_t{32} << 20;

void keep_large_blocks_in_heap() {
#ifdef __GLIBC__
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, kHeapLimit);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)once;
#endif
}

// Larger blocks, which glibc always maps afresh, are cached by Loom instead, with
// the CUDA allocator's bookkeeping (core/block_pool.h: best fit, split, merged
// when freed) over segments from the C heap: resnet18 at batch 64 on 2 CPU threads
// paid 2.8 M page faults and 5.6 s of system time in 41 s of CPU time over 5 steps
// without it. Cached segments go back only when a new one cannot be had.
class HostSegments final : public cuda::SegmentSource {
 public:
  void* acquire(size_t bytes) override { return std::aligned_alloc(kCpuAlignment, bytes); }
  void release(void* base, size_t) override { std::free(base); }
};

class LargeHostBlocks {
 public:
  // nullptr when the host is out of memory even with the cache given back.
  void* allocate(size_t bytes) {
    const size_t size = cuda::round_block_size(bytes);
    std::lock_guard lock(mutex_);
    cuda::Block* block = pool_.take_cached(size, nullptr);
    if (block == nullptr) block = pool_.take_new(size, nullptr);
    if (block == nullptr && pool_.release_cached() > 0) block = pool_.take_new(size, nullptr);
    if (block == nullptr) return nullptr;
    blocks_.emplace(block->ptr, block);
    return block->ptr;
  }

  void deallocate(void* ptr) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(ptr);
    LOOM_CHECK(it != blocks_.end(), ValueError,
               "[storage] freeing a large host block the cache did not hand out ({})", ptr);
    pool_.give_back(it->second);
    blocks_.erase(it);
  }

  // Never destroyed: storages may be freed during the process's teardown.
  static LargeHostBlocks& global() {
    static LargeHostBlocks* const blocks = new LargeHostBlocks;
    return *blocks;
  }

 private:
  std::mutex mutex_;
  HostSegments source_;
  cuda::AllocatorStats stats_;
  cuda::BlockPool pool_{source_, stats_};
  std::unordered_map<void*, cuda::Block*> blocks_;
};

void* allocate_host(size_t nbytes) {
  if (nbytes > kHeapLimit) return LargeHostBlocks::global().allocate(nbytes);
  keep_large_blocks_in_heap();
  const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  return std::aligned_alloc(kCpuAlignment, rounded);
}

void free_host(void* data, size_t nbytes) {
  if (nbytes > kHeapLimit) {
    LargeHostBlocks::global().deallocate(data);
  } else {
    std::free(data);
  }
}

void* allocate(size_t nbytes, Device device) {
  check_device(device);
  if (nbytes == 0) return nullptr;
  if (device.is_cuda()) {
#ifdef LOOM_WITH_CUDA
    return cuda::allocate(nbytes, device.index);
#endif
  }
  void* data = allocate_host(nbytes);
  LOOM_CHECK(data != nullptr, OutOfMemoryError,
             "[storage] out of host memory allocating {} bytes ({:.1f} GiB); use smaller "
             "tensors or batches",
             nbytes, static_cast<double>(nbytes) / (1 << 30));
  return data;
}

}  // namespace

Storage::Storage(size_t nbytes, Device device)
    : data_(allocate(nbytes, device)), nbytes_(nbytes), device_(device) {
  if (data_ != nullptr) counter(device_.type) += nbytes_;
}

Storage::~Storage() {
  if (data_ == nullptr) return;
  counter(device_.type) -= nbytes_;
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    cuda::deallocate(data_);
    return;
  }
#endif
  free_host(data_, nbytes_);
}

size_t storage_bytes_in_use(DeviceType type) { return counter(type).load(); }

}  // namespace loom
