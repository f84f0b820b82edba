// File: core/cuda/pool.h
// 2-D max and average pooling on the GPU: the twins of core/cpu/pool.h, with the
// same signatures and results, so an op can call cpu:: or cuda:: alike.
//
// N batch, C channels, H, W input plane, P, Q output plane.
// Every tensor is 4-D (N, C, ., .) float32 or float64, or bfloat16 / float16
// computing in float32 (GPU-only dtypes), indices int64, with any
// strides (NCHW, channels-last, views); outputs must not overlap inputs. The op
// validates the geometry and sizes the output. Each output element is written
// by one thread, and every sum runs in the CPU kernel's order, so results equal
// the CPU's bit for bit (but for the atomic max_pool2d_backward, see below).
#pragma once

#include "core/kernel/pool.h"
#include "core/strided.h"

namespace loom::cuda {

// x (N, C, H, W) -> y (N, C, P, Q) and indices (N, C, P, Q, int64): the window's
// max and its flat position h * W + w in the input plane. The first occurrence
// wins among ties; a NaN wins over numbers.
void max_pool2d_forward(const Strided& y, const Strided& indices, const Strided& x,
                        const kernel::Pool2dParams& params);
// dx (N, C, H, W) is overwritten: each element sums the dy whose index is it.
// Deterministic: each thread gathers over the windows covering its element, so
// it needs the forward's params (indices must come from that forward).
void max_pool2d_backward(const Strided& dx, const Strided& dy, const Strided& indices,
                         const kernel::Pool2dParams& params);
// cpu::max_pool2d_backward's exact signature: zero dx, then atomicAdd each dy at
// its index. Where stride < kernel, an element several windows picked receives
// their dy in no fixed order, so float results may differ run to run in the last
// bits; prefer the overload above.
void max_pool2d_backward(const Strided& dx, const Strided& dy, const Strided& indices);

// y = window sum (in double) / divisor. params.count_include_pad: the divisor is the
// window clipped to the padded extent (H + 2 pad_h rows); otherwise only the
// elements inside the input.
void avg_pool2d_forward(const Strided& y, const Strided& x, const kernel::Pool2dParams& params);
// dx (N, C, H, W) is overwritten: each element sums dy / divisor over the windows
// covering it (a gather: deterministic).
void avg_pool2d_backward(const Strided& dx, const Strided& dy, const kernel::Pool2dParams& params);

}  // namespace loom::cuda
