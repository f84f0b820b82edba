// File: core/cudnn/softmax.h
// Softmax and log-softmax on the GPU through cuDNN's legacy softmax API
// (cudnnSoftmaxForward/Backward, not deprecated in 9.19; the graph API has no
// softmax op before 9.21). Same functions and arguments as core/cpu/softmax.h,
// with one restriction: every operand must be contiguous (row-major). The op
// makes views contiguous first; anything else is a ValueError.
//
// A tensor is seen as a 4-D NCHW (outer, C, inner, 1) tensor: C is the size of
// `dim`, outer and inner the products of the sizes before and after it, and
// cuDNN's CHANNEL mode works along C. A 0-D operand is one row of length 1.
#pragma once

#include <cstdint>

#include "core/strided.h"

namespace loom::cudnn {

// y = exp(x - max) / sum(exp(x - max)) along `dim` (CUDNN_SOFTMAX_ACCURATE).
void softmax_forward(const Strided& y, const Strided& x, int64_t dim);
// dx = y * (dy - sum(dy * y)) along `dim`, from the forward output y.
void softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim);

// y = x - max - log(sum(exp(x - max))) along `dim` (CUDNN_SOFTMAX_LOG).
void log_softmax_forward(const Strided& y, const Strided& x, int64_t dim);
// dx = dy - exp(y) * sum(dy) along `dim`, from the forward output y.
void log_softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim);

}  // namespace loom::cudnn
