#include "core/storage.h"

#include <cstdlib>

#include "core/error.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace loom {

namespace {

constexpr size_t kCpuAlignment = 64;  // a cache line; also what AVX-512 loads like

void* allocate(size_t nbytes, Device device) {
  if (nbytes == 0) return nullptr;
  if (device.is_cuda()) {
#ifdef LOOM_WITH_CUDA
    return cuda::malloc_device(nbytes, device.index);
#else
    throw DeviceError(fmt::format(
        "[storage] cannot allocate {} bytes on {}: this build of Loom has no CUDA backend "
        "(build where /usr/local/cuda exists, without --config=cpu)",
        nbytes, device.str()));
#endif
  }
  size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  void* data = std::aligned_alloc(kCpuAlignment, rounded);
  LOOM_CHECK(data != nullptr, Error, "[storage] out of host memory allocating {} bytes", nbytes);
  return data;
}

}  // namespace

Storage::Storage(size_t nbytes, Device device)
    : data_(allocate(nbytes, device)), nbytes_(nbytes), device_(device) {}

Storage::~Storage() {
  if (data_ == nullptr) return;
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    cuda::free_device(data_, device_.index);
    return;
  }
#endif
  std::free(data_);
}

}  // namespace loom
