// File: core/cpu/pad.h
// Padding kernels behind loom::pad (core/ops/pad.h): every dim of `out` is the
// input's dim with `before[d]` elements added in front (removed when negative)
// and the rest added at the end. Constant padding writes a value; reflect and
// replicate read the input at the mirrored or the clamped index
// (core/kernel/pad.h). Any dtype, any strides, at most kPadMaxDims dims.
#pragma once

#include <cstdint>

#include "core/kernel/pad.h"
#include "core/shape.h"
#include "core/strided.h"

namespace loom::cpu {

// out = in padded by spec (out's sizes say how much is added after).
void pad(const Strided& out, const Strided& in, const kernel::PadSpec& spec);
// The gradient of a reflect or replicate pad: dx[i] sums dy over every output
// element that read input element i, in a fixed order (deterministic).
// Floating dtypes; dx and dy have the input's and the output's sizes.
void pad_backward(const Strided& dx, const Strided& dy, const kernel::PadSpec& spec);

}  // namespace loom::cpu
