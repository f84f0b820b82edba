// File: core/cuda/counter.cc
// Device-side counters: the increment kernel's launch on the current stream.
#include "core/cuda/counter.h"

#include "core/cuda/counter_kernels.h"
#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void increment(int64_t* counter, int64_t by) {
  LOOM_CUDA_CHECK(launch_increment(counter, by, current_stream()));
}

bool increment_at_capture_end(int64_t* counter, int64_t by) { return CudaGraph::add_at_end(counter, by); }

}  // namespace loom::cuda
