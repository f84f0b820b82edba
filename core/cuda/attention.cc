// File: core/cuda/attention.cc
// Checked launches of the attention kernels on the current stream.
#include "core/cuda/attention.h"

#include "core/cuda/attention_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void attention_forward(const Strided& y, const Strided& q, const Strided& k, const Strided& v, double scale,
                       bool causal) {
  LOOM_CUDA_CHECK(launch_attention_forward(y, q, k, v, scale, causal, current_stream()));
}

void attention_backward(const Strided& dq, const Strided& dk, const Strided& dv, const Strided& dy,
                        const Strided& q, const Strided& k, const Strided& v, double scale, bool causal) {
  LOOM_CUDA_CHECK(launch_attention_backward(dq, dk, dv, dy, q, k, v, scale, causal, current_stream()));
}

}  // namespace loom::cuda
