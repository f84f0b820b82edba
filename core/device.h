// File: core/device.h
// Where a tensor's storage lives.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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
  // "cpu", "cuda" (cuda:0) or "cuda:k", as str() writes them and torch.device
  // reads them; ValueError for anything else. Whether the GPU exists is checked
  // where a tensor is placed on it.
  static Device parse(std::string_view text);
};

// Makes a GPU the calling thread's current device until the guard ends, so the
// kernels, streams, handles and plans an op uses are that GPU's; nothing for
// the CPU. Every op takes the device of its operands this way, so a model on
// cuda:1 runs on GPU 1 whichever device the thread had before.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  std::optional<int> previous_;  // the thread's device before, where it had to change
};

// The calling thread's current GPU: cuda:0 unless a DeviceGuard (or
// cudaSetDevice) made another one current. A CPU-only build's answer is cuda:0.
Device current_cuda_device();

// True when this binary was built with the CUDA backend.
bool cuda_built();
// True when the CUDA backend is built and at least one GPU can be used.
bool cuda_available();
int cuda_device_count();

}  // namespace loom
