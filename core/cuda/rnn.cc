// File: core/cuda/rnn.cc
// Checked launches of the recurrent step kernels on the current stream.
#include "core/cuda/rnn.h"

#include "core/cuda/rnn_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

bool rnn_run_fits(RnnMode mode, int64_t batch, int64_t hidden, DType dtype) {
  bool fits = false;
  LOOM_CUDA_CHECK(cuda::rnn_run_fits(mode, batch, hidden, dtype, fits));
  return fits;
}

void rnn_run_forward(const kernel::RnnRun& run) {
  LOOM_CUDA_CHECK(launch_rnn_run(run, true, current_stream()));
}

void rnn_run_backward(const kernel::RnnRun& run) {
  LOOM_CUDA_CHECK(launch_rnn_run(run, false, current_stream()));
}

void rnn_step_forward(const kernel::RnnStep& step) {
  LOOM_CUDA_CHECK(launch_rnn_step(step, step.gx.sizes[0], step.gx.dtype, true, current_stream()));
}

void rnn_step_backward(const kernel::RnnStep& step) {
  LOOM_CUDA_CHECK(launch_rnn_step(step, step.dh.sizes[0], step.dh.dtype, false, current_stream()));
}

}  // namespace loom::cuda
