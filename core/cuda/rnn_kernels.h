// File: core/cuda/rnn_kernels.h
// Launchers for the recurrent step kernels in rnn.cu; they return the launch
// status, which core/cuda/rnn.cc checks.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/rnn.h"

namespace loom::cuda {

// `samples` rows of step.hidden units; dtype is the views' storage dtype.
cudaError_t launch_rnn_step(const kernel::RnnStep& step, int64_t samples, DType dtype, bool forward,
                            cudaStream_t stream);

}  // namespace loom::cuda
