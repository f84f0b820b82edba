// File: core/cuda/rnn.h
// The pointwise part of one recurrent time step (core/kernel/rnn.h) on the
// GPU: one kernel forward, one backward, a thread per (sample, hidden unit),
// queued on cuda::current_stream() (capturable). 16-bit dtypes compute in
// float32 and round once when stored.
#pragma once

#include "core/kernel/rnn.h"

namespace loom::cuda {

// As cpu::rnn_step_forward and cpu::rnn_step_backward (core/cpu/rnn.h).
void rnn_step_forward(const kernel::RnnStep& step);
void rnn_step_backward(const kernel::RnnStep& step);

}  // namespace loom::cuda
