// File: core/cuda/rnn.cu
// The recurrent step kernels: core/kernel/rnn.h's units, a thread each.
#include "core/cuda/element.cuh"
#include "core/cuda/rnn_kernels.h"

namespace loom::cuda {

namespace {

constexpr int kThreads = 256;

struct Convert {
  template <class C, class S>
  __device__ static C in(S value) {
    return static_cast<C>(to_compute(value));
  }
  template <class S, class C>
  __device__ static S out(C value) {
    return from_compute<S>(static_cast<compute_t<S>>(value));
  }
};

template <class S, bool Forward>
__global__ void rnn_step_kernel(kernel::RnnRows<S> rows, int64_t units) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= units) return;
  const int64_t n = index / rows.hidden, j = index % rows.hidden;
  if constexpr (Forward) {
    kernel::rnn_forward_unit<compute_t<S>, Convert>(rows, n, j);
  } else {
    kernel::rnn_backward_unit<compute_t<S>, Convert>(rows, n, j);
  }
}

}  // namespace

cudaError_t launch_rnn_step(const kernel::RnnStep& step, int64_t samples, DType dtype, bool forward,
                            cudaStream_t stream) {
  const int64_t units = samples * step.hidden;
  if (units == 0) return cudaSuccess;
  const int blocks = static_cast<int>((units + kThreads - 1) / kThreads);
  return visit_floating(dtype, [&]<class S>() {
    const kernel::RnnRows<S> rows = kernel::rnn_rows<S>(step);
    if (forward) {
      rnn_step_kernel<S, true><<<blocks, kThreads, 0, stream>>>(rows, units);
    } else {
      rnn_step_kernel<S, false><<<blocks, kThreads, 0, stream>>>(rows, units);
    }
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda
