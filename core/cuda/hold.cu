// File: core/cuda/hold.cu
// A kernel that keeps a stream busy for a given time (event_timer.h's start):
// it sleeps in short naps until the global timer has moved that far.
#include "core/cuda/hold_kernels.h"

namespace loom::cuda {

namespace {

__device__ uint64_t global_ns() {
  uint64_t now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void hold_kernel(uint64_t ns) {
  const uint64_t begin = global_ns();
  while (global_ns() - begin < ns) __nanosleep(1000);
}

}  // namespace

cudaError_t launch_hold(uint64_t ns, cudaStream_t stream) {
  hold_kernel<<<1, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

}  // namespace loom::cuda
