// File: core/ops/activation_internal.h
// The activation kernels' device and tier dispatch (cuDNN, oneDNN, Loom's
// kernels), shared by the activation op and the fused blocks' steps so that
// both compute the same bits. Private to core/ops.
#pragma once

#include "core/kernel/activation.h"
#include "core/tensor.h"

namespace loom::activation_detail {

// y = f(x) for the row `kind` with its scalars; y and x share sizes (and, for the fast tiers, a layout).
void forward_kernel(const Tensor& y, const Tensor& x, kernel::ActivationKind kind,
                    const kernel::ActivationParameters& parameters);

// dx = f'(dy + dy_addend, saved), saved being what the row saves (its input or
// output); dy_addend (same sizes and layout as dy) may be undefined. cuDNN's
// graph adds it as it reads dy; the other tiers take the sum first.
void backward_kernel(const Tensor& dx, const Tensor& dy, const Tensor& saved, kernel::ActivationKind kind,
                     const kernel::ActivationParameters& parameters, const Tensor& dy_addend = Tensor());

}  // namespace loom::activation_detail
