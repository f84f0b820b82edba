// File: core/storage.h
// A refcounted block of memory on one device. Views share a Storage; its
// version counter is how autograd notices in-place writes to saved tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace loom {

class Storage {
 public:
  // Allocates nbytes on `device` (64-byte aligned on the CPU).
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
};

}  // namespace loom
