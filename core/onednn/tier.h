// File: core/onednn/tier.h
// Whether the CPU's ops run on the oneDNN tier: what the ops ask before they
// pick a kernel layout (oneDNN computes channels-last operands in place, the
// reference kernels want NCHW).
#pragma once

#include "core/dtype.h"

namespace loom::onednn {

// True when the oneDNN tier runs CPU ops now: chosen (core/cpu_backend.h) and
// loaded. A default choice whose library does not load warns once and gives
// false; a named one throws loom::Error.
bool active();

// active(), for a dtype oneDNN's primitives take here (float32; float64 stays
// on the reference kernels).
bool takes(DType dtype);

}  // namespace loom::onednn
