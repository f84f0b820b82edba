// File: core/cuda/counter.cu
// Counters kept in device memory: incremented by a kernel, so that work
// captured into a CUDA graph counts every replay (a host-side count would be
// frozen into the graph at capture).
#include "core/cuda/counter_kernels.h"

namespace loom::cuda {

namespace {

__global__ void increment_kernel(int64_t* counter, int64_t by) { *counter += by; }

}  // namespace

cudaError_t launch_increment(int64_t* counter, int64_t by, cudaStream_t stream) {
  increment_kernel<<<1, 1, 0, stream>>>(counter, by);
  return cudaGetLastError();
}

}  // namespace loom::cuda
