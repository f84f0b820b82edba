// File: core/cpu/activation.h
// The activation rows of core/kernel/activation.h over strided operands (float32 and
// float64). core/cuda/elementwise.h has the GPU twins, same signatures.
#pragma once

#include "core/kernel/activation.h"
#include "core/strided.h"

namespace loom::cpu {

// y = f(x) for `kind` with its scalars (the row's defaults filled in).
void activation_forward(const Strided& y, const Strided& x, kernel::ActivationKind kind,
                        const kernel::ActivationParameters& parameters);
// y = f(a + b): a residual add and the activation after it in one pass.
void add_activation(const Strided& y, const Strided& a, const Strided& b, kernel::ActivationKind kind,
                    const kernel::ActivationParameters& parameters);
// dx = f'(dy, saved): saved is the forward's input or output, as the row says.
void activation_backward(const Strided& dx, const Strided& dy, const Strided& saved,
                         kernel::ActivationKind kind, const kernel::ActivationParameters& parameters);

}  // namespace loom::cpu
