// File: core/cuda/pad.h
// The GPU twins of core/cpu/pad.h: same signatures and semantics (the same
// index math and, in the gradient, the same summation order), queued on
// cuda::current_stream(). bfloat16 and float16 gradients accumulate in float32.
#pragma once

#include "core/kernel/pad.h"
#include "core/strided.h"

namespace loom::cuda {

void pad(const Strided& out, const Strided& in, const kernel::PadSpec& spec);
void pad_backward(const Strided& dx, const Strided& dy, const kernel::PadSpec& spec);

}  // namespace loom::cuda
