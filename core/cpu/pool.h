// File: core/cpu/pool.h
// 2-D max and average pooling kernels, forward and backward, for float32 and float64.
//
// N batch, C channels, H, W input plane, P, Q output plane.
// Every tensor is 4-D (N, C, ., .) with any strides (NCHW, channels-last, views): a
// kernel reads and writes each (H, W) plane through its own strides, so callers
// never copy to change layout. Outputs must not overlap inputs. The op validates
// the geometry and sizes the output (ceil_mode only changes P and Q).
#pragma once

#include <cstdint>

#include "core/kernel/pool.h"
#include "core/strided.h"

namespace loom::cpu {

// x (N, C, H, W) -> y (N, C, P, Q) and indices (N, C, P, Q, int64): the window's
// max and its flat position h * W + w in the input plane, as PyTorch. The first
// occurrence wins among ties; a NaN wins over numbers.
void max_pool2d_forward(const Strided& y, const Strided& indices, const Strided& x,
                        const kernel::Pool2dParams& params);
// dx (N, C, H, W) is overwritten: zero, then dy added at each saved index.
void max_pool2d_backward(const Strided& dx, const Strided& dy, const Strided& indices);

// y = window sum / divisor. params.count_include_pad: the divisor is the window clipped to
// the padded extent (H + 2 pad_h rows); otherwise only the elements inside the input.
void avg_pool2d_forward(const Strided& y, const Strided& x, const kernel::Pool2dParams& params);
// dx (N, C, H, W) is overwritten: each dy / divisor spread over its window.
void avg_pool2d_backward(const Strided& dx, const Strided& dy, const kernel::Pool2dParams& params);

}  // namespace loom::cpu
