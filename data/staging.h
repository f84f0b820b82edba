// File: data/staging.h
// Pinned (page-locked) host buffers for one batch, so its copy to the GPU can
// run asynchronously, and the event that says when that copy has finished and
// the buffers may be refilled. Used only for CUDA devices; in a build without
// CUDA constructing one throws DeviceError.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/shape.h"
#include "data/dataloader.h"

// B batch, C channels, H, W image size
namespace loom::data {

class PinnedBatch {
 public:
  // Room for the largest batch: x_capacity floats and y_capacity labels, staged
  // for GPU `device`.
  PinnedBatch(int64_t x_capacity, int64_t y_capacity, Device device);
  ~PinnedBatch();
  PinnedBatch(const PinnedBatch&) = delete;
  PinnedBatch& operator=(const PinnedBatch&) = delete;

  float* x() const { return x_; }
  int64_t* y() const { return y_; }
  // Blocks until the last copy_to's transfers are done (the buffers are free).
  void wait_for_copies();
  // New tensors x (x_sizes) and y (x_sizes[0],) on the device, filled from the
  // buffers by asynchronous copies on the calling thread's stream there.
  Batch copy_to_device(const Shape& x_sizes);

 private:
  Device device_;
  float* x_ = nullptr;
  int64_t* y_ = nullptr;
  void* copied_ = nullptr;  // cudaEvent_t of the last copy_to, when one is pending
};

}  // namespace loom::data
