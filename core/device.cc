#include "core/device.h"

#include <fmt/format.h>

#ifdef LOOM_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace loom {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
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
