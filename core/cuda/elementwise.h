// File: core/cuda/elementwise.h
// The GPU twins of core/cpu/elementwise.h: same signatures and semantics (NaN
// handling included), so an op dispatches cpu::foo or cuda::foo with the same
// arguments. Operands live on the current GPU; work is queued on
// cuda::current_stream(). Each thread computes in the operands' dtype, so results
// differ from the CPU only by the rounding of the device math library and FMA
// contraction (a few ulp). bfloat16 and float16 operands (GPU only) compute in
// float32 and round once on store.
#pragma once

#include "core/kernel/activation.h"
#include "core/kernel/elementwise.h"
#include "core/strided.h"

namespace loom::cuda {

using kernel::BinaryOp;
using kernel::UnaryOp;

void unary(const Strided& out, const Strided& in, UnaryOp op);
void binary(const Strided& out, const Strided& a, const Strided& b, BinaryOp op);
// The activation rows (core/cpu/activation.h), same signatures.
void activation_forward(const Strided& y, const Strided& x, kernel::ActivationKind kind,
                        const kernel::ActivationParameters& parameters);
void activation_backward(const Strided& dx, const Strided& dy, const Strided& saved,
                         kernel::ActivationKind kind, const kernel::ActivationParameters& parameters);
void add_activation(const Strided& y, const Strided& a, const Strided& b, kernel::ActivationKind kind,
                    const kernel::ActivationParameters& parameters);
// out = a op scalar, or scalar op a when scalar_first (for 2 - x, 1 / x).
void binary_scalar(const Strided& out, const Strided& a, double scalar, BinaryOp op,
                   bool scalar_first = false);
// out = a + alpha * b (also the gradient accumulation of autograd).
void add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha);
// out = min(max(in, lo), hi); NaN stays NaN.
void clamp(const Strided& out, const Strided& in, double lo, double hi);
// dx = dy where lo <= x <= hi, else 0.
void clamp_backward(const Strided& dx, const Strided& dy, const Strided& x, double lo, double hi);

}  // namespace loom::cuda
