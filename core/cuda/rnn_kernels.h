// File: core/cuda/rnn_kernels.h
// Launchers for the recurrent step kernels in rnn.cu; they return the launch
// status, which core/cuda/rnn.cc checks.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/rnn.h"

namespace loom::cuda {

// Whether launch_rnn_run takes `batch` samples of `hidden` units in dtype on
// the current GPU (into fits).
cudaError_t rnn_run_fits(RnnMode mode, int64_t batch, int64_t hidden, DType dtype, bool& fits);
// Every step of run in one kernel, forward or backward; where rnn_run_fits
// said no, cudaErrorInvalidConfiguration.
cudaError_t launch_rnn_run(const kernel::RnnRun& run, bool forward, cudaStream_t stream);

// `samples` rows of step.hidden units; dtype is the views' storage dtype.
cudaError_t launch_rnn_step(const kernel::RnnStep& step, int64_t samples, DType dtype, bool forward,
                            cudaStream_t stream);

}  // namespace loom::cuda
