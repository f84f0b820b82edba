#include "core/storage.h"

#include <cstdlib>

#include "core/error.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/allocator.h"
#endif

namespace loom {

namespace {

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

void* allocate(size_t nbytes, Device device) {
  check_device(device);
  if (nbytes == 0) return nullptr;
  if (device.is_cuda()) {
#ifdef LOOM_WITH_CUDA
    return cuda::allocate(nbytes, device.index);
#endif
  }
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
    : data_(allocate(nbytes, device)), nbytes_(nbytes), device_(device) {}

Storage::~Storage() {
  if (data_ == nullptr) return;
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    cuda::deallocate(data_);
    return;
  }
#endif
  std::free(data_);
}

}  // namespace loom
