// File: core/cpu/rnn.h
// The pointwise part of one recurrent time step (core/kernel/rnn.h), forward
// and backward, over every sample and hidden unit: one pass each, in float64
// for float64 and float32 for the other floating dtypes.
#pragma once

#include "core/kernel/rnn.h"

namespace loom::cpu {

// Reads step.gx, gh and prev; writes step.h, gates and aux.
void rnn_step_forward(const kernel::RnnStep& step);
// Reads step.dh, dy, gates, aux, prev and h; writes dgx (and dgh, dh_direct
// for a GRU), and replaces an LSTM's dc.
void rnn_step_backward(const kernel::RnnStep& step);

}  // namespace loom::cpu
