// File: core/cuda/counter.h
// Device-side counters (BatchNorm's num_batches_tracked): the increment is a
// kernel on the current stream, so a captured CUDA graph counts each replay.
#pragma once

#include <cstdint>

namespace loom::cuda {

// *counter += by, where counter is one int64 in device memory.
void increment(int64_t* counter, int64_t by);
// Where the calling thread captures a CudaGraph on the current device, adds
// `by` to what the graph adds to *counter in one launch at the end of its
// captured work, and returns true; else does nothing and returns false.
bool increment_at_capture_end(int64_t* counter, int64_t by);

}  // namespace loom::cuda
