// File: core/storage.cc
// Refcounted memory on one device: allocation on that device and release.
#include "core/storage.h"

#include <atomic>
#include <cstdlib>

#ifdef __GLIBC__
#include <malloc.h>
#endif

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
void keep_large_blocks_in_heap() {
#ifdef __GLIBC__
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)once;
#endif
}

void* allocate(size_t nbytes, Device device) {
  check_device(device);
  if (nbytes == 0) return nullptr;
  if (device.is_cuda()) {
#ifdef LOOM_WITH_CUDA
    return cuda::allocate(nbytes, device.index);
#endif
  }
  keep_large_blocks_in_heap();
  size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  void* data = std::aligned_alloc(kCpuAlignment, rounded);
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
  std::free(data_);
}

size_t storage_bytes_in_use(DeviceType type) { return counter(type).load(); }

}  // namespace loom
