// File: core/storage_stats.h
// How many bytes live Storage objects hold, per device type: what the
// saved-tensor accounting (core/autograd_memory.h) measures releases with.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace loom {

// Bytes held by live Storage objects of one device type (CUDA: all GPUs
// together), as requested (before the allocator's rounding). Tensors only:
// cuDNN workspaces and allocator caches are not counted.
size_t storage_bytes_in_use(DeviceType type);

}  // namespace loom
