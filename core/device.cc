// File: core/device.cc
// Device names, the device guard and what the build and the machine offer.
#include "core/device.h"

#include <fmt/format.h>

#include <charconv>

#include "core/error.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace loom {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda();
  constexpr std::string_view kPrefix = "cuda:";
  if (text.starts_with(kPrefix)) {
    const std::string_view digits = text.substr(kPrefix.size());
    int index = 0;
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (error == std::errc() && end == digits.data() + digits.size() && !digits.empty() &&
        index >= 0) {
      return cuda(index);
    }
  }
  throw ValueError(fmt::format(
      "[device] '{}' is not a device; write cpu, cuda or cuda:k with k a GPU index (0, 1, ...)",
      text));
}

Device current_cuda_device() {
#ifdef LOOM_WITH_CUDA
  if (cuda_device_count() > 0) return Device::cuda(cuda::current_device());
#endif
  return Device::cuda(0);
}

DeviceGuard::DeviceGuard(Device device) {
#ifdef LOOM_WITH_CUDA
  if (!device.is_cuda()) return;
  const int current = cuda::current_device();
  if (current == device.index) return;
  LOOM_CUDA_CHECK(cudaSetDevice(device.index));
  previous_ = current;
#else
  (void)device;
#endif
}

DeviceGuard::~DeviceGuard() {
#ifdef LOOM_WITH_CUDA
  if (previous_) cudaSetDevice(*previous_);
#endif
}

bool cuda_built() {
#ifdef LOOM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef LOOM_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

}  // namespace loom
