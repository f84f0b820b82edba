// File: core/cuda/attention_kernels.h
// Launchers for the kernels in attention.cu (semantics of core/cuda/attention.h).
// They return the launch status; core/cuda/attention.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include "core/strided.h"

namespace loom::cuda {

cudaError_t launch_attention_forward(const Strided& y, const Strided& q, const Strided& k, const Strided& v,
                                     double scale, bool causal, cudaStream_t stream);
cudaError_t launch_attention_backward(const Strided& dq, const Strided& dk, const Strided& dv,
                                      const Strided& dy, const Strided& q, const Strided& k,
                                      const Strided& v, double scale, bool causal, cudaStream_t stream);

}  // namespace loom::cuda
