// File: core/cuda/counter.cu
// Counters kept in device memory: incremented by a kernel, so that work
// captured into a CUDA graph counts every replay (a host-side count would be
// frozen into the graph at capture).
#include "core/cuda/counter_kernels.h"

namespace loom::cuda {

namespace {

__global__ void increment_kernel(int64_t* counter, int64_t by) { *counter += by; }

// The counters are distinct, so no two threads touch one.
__global__ void increment_batch_kernel(CounterBatch batch) {
  if (static_cast<int>(threadIdx.x) < batch.count) *batch.counters[threadIdx.x] += batch.by[threadIdx.x];
}

}  // namespace

cudaError_t launch_increment(int64_t* counter, int64_t by, cudaStream_t stream) {
  increment_kernel<<<1, 1, 0, stream>>>(counter, by);
  return cudaGetLastError();
}

cudaError_t launch_increments(const CounterBatch& batch, cudaStream_t stream) {
  increment_batch_kernel<<<1, kCounterBatch, 0, stream>>>(batch);
  return cudaGetLastError();
}

}  // namespace loom::cuda
