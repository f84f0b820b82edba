// File: core/cpu/activation.h
// The activation rows of activation_math.h over strided operands (float32 and
// float64). core/cuda/elementwise.h has the GPU twins, same signatures.
#pragma once

#include "core/cpu/activation_math.h"
#include "core/strided.h"

namespace loom::cpu {

// y = f(x) for `kind` with its scalars (the row's defaults filled in).
void activation_forward(const Strided& y, const Strided& x, ActivationKind kind,
                        const ActivationParameters& parameters);
// dx = f'(dy, saved): saved is the forward's input or output, as the row says.
void activation_backward(const Strided& dx, const Strided& dy, const Strided& saved,
                         ActivationKind kind, const ActivationParameters& parameters);

}  // namespace loom::cpu
