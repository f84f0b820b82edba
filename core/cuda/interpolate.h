// File: core/cuda/interpolate.h
// The GPU twins of core/cpu/interpolate.h: same signatures and semantics (the
// same pixels, weights and, in the gradient, summation order), queued on
// cuda::current_stream(). bfloat16 and float16 compute in float32.
#pragma once

#include "core/kernel/interpolate.h"
#include "core/strided.h"

namespace loom::cuda {

void interpolate(const Strided& y, const Strided& x, const kernel::InterpolateSpec& spec);
void interpolate_backward(const Strided& dx, const Strided& dy, const kernel::InterpolateSpec& spec);

}  // namespace loom::cuda
