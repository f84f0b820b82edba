// File: core/device.h
// Where a tensor's storage lives.
#pragma once

#include <string>

namespace loom {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

// True when this binary was built with the CUDA backend.
bool cuda_built();
// True when the CUDA backend is built and at least one GPU can be used.
bool cuda_available();
int cuda_device_count();

}  // namespace loom
