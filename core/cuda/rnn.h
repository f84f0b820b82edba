// File: core/cuda/rnn.h
// Recurrent steps (core/kernel/rnn.h) on the GPU, queued on
// cuda::current_stream() (capturable); 16-bit dtypes compute in float32 and
// round once when stored. Two tiers:
// - the pointwise part of one time step: one kernel forward, one backward, a
//   thread per (sample, hidden unit), beside a matrix product per step;
// - a whole run of steps in one kernel each way, where W_hh and a block's
//   states fit one block's shared memory and the batch one wave of blocks:
//   small and mid-sized layers, whose per-step products are too small to fill
//   the GPU and whose time goes to launches.
#pragma once

#include "core/kernel/rnn.h"

namespace loom::cuda {

// Whether rnn_run_forward and rnn_run_backward take `batch` samples of
// `hidden` units in dtype on the current GPU. Asked once per shape and device.
bool rnn_run_fits(RnnMode mode, int64_t batch, int64_t hidden, DType dtype);
// Every step of run (kernel::RnnRun, each view dense) where rnn_run_fits:
// forward writes out, gates and aux; backward writes dgx, dgh (GRU), dh0 and
// replaces dc.
void rnn_run_forward(const kernel::RnnRun& run);
void rnn_run_backward(const kernel::RnnRun& run);

// As cpu::rnn_step_forward and cpu::rnn_step_backward (core/cpu/rnn.h).
void rnn_step_forward(const kernel::RnnStep& step);
void rnn_step_backward(const kernel::RnnStep& step);

}  // namespace loom::cuda
