// File: core/cudnn/activation.h
// An activation row (core/kernel/activation.h) forward and backward as a
// cuDNN pointwise graph (pointwise.h says how and when one runs). No cuDNN
// types, so core/ops includes it in every build.
#pragma once

#include <optional>

#include "core/kernel/activation.h"
#include "core/strided.h"

namespace loom::cudnn {

// y = the row's activation of x; dx = its derivative applied to dy (+ dy_addend,
// a second gradient of the same output: autograd's sum, folded in), from the
// saved tensor the row's backward reads. False where the row has no cuDNN mode
// or no engine runs these operands: the caller runs the Loom kernel (the same row).
bool activation_forward(kernel::ActivationKind kind, const kernel::ActivationParameters& parameters,
                        const Strided& y, const Strided& x);
bool activation_backward(kernel::ActivationKind kind, const kernel::ActivationParameters& parameters,
                         const Strided& dx, const Strided& dy, const Strided& saved,
                         const std::optional<Strided>& dy_addend = std::nullopt);

}  // namespace loom::cudnn
