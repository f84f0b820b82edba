// File: core/cuda/hold_kernels.h
// The launcher of hold.cu; core/cuda/event_timer.cc checks its status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom::cuda {

// Occupies `stream` for about `ns` nanoseconds (one thread, asleep most of it).
cudaError_t launch_hold(uint64_t ns, cudaStream_t stream);

}  // namespace loom::cuda
