// File: core/onednn/eltwise.h
// The activation rows (core/kernel/activation.h) and softmax / log-softmax on
// oneDNN, forward and backward, with the reference kernels' signatures. A row
// runs here when oneDNN has the same function (sigmoid, tanh, gelu both ways,
// silu, elu, mish, hardswish, softplus at beta 1); the others (relu,
// leaky_relu, relu6 and hardtanh: eltwise.cc says why), and rows added later,
// stay on the reference kernels until mapped in eltwise.cc.
//
// Operands are float32. An activation's operands are dense in one shared
// layout (any dims: oneDNN sees them as one flat vector); softmax's are dense
// NCHW / NHWC / row-major, the dim any. Each call returns false, having written
// nothing, when the tier is off or oneDNN has no fast implementation.
#pragma once

#include <cstdint>

#include "core/kernel/activation.h"
#include "core/strided.h"

namespace loom::onednn {

// y = f(x) for the row `kind` with its scalars (the row's defaults filled in).
bool activation_forward(const Strided& y, const Strided& x, kernel::ActivationKind kind,
                        const kernel::ActivationParameters& parameters);
// dx = f'(dy, saved), saved being what the row saves (its input or output).
bool activation_backward(const Strided& dx, const Strided& dy, const Strided& saved,
                         kernel::ActivationKind kind, const kernel::ActivationParameters& parameters);

// y = softmax (or log-softmax) of x along dim; dx from dy and the forward's y.
bool softmax_forward(const Strided& y, const Strided& x, int64_t dim, bool log);
bool softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim, bool log);

}  // namespace loom::onednn
