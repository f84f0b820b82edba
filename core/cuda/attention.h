// File: core/cuda/attention.h
// Scaled dot-product attention for short sequences, one kernel a direction:
// y = softmax(q k^T * scale) v (with `causal`, query i sees keys 0..i only),
// and its three gradients, queued on
// cuda::current_stream(). One block per attention holds its operands in shared
// memory (core/kernel/attention.h says which problems fit); bfloat16 and float16
// compute in float32.
//
// Operands are (B1, B2, rows, width) with any strides but a unit one on the width
// (a 3-d attention passes B1 = 1); outputs take any such strides too.
#pragma once

#include "core/strided.h"

namespace loom::cuda {

void attention_forward(const Strided& y, const Strided& q, const Strided& k, const Strided& v, double scale,
                       bool causal);
void attention_backward(const Strided& dq, const Strided& dk, const Strided& dv, const Strided& dy,
                        const Strided& q, const Strided& k, const Strided& v, double scale, bool causal);

}  // namespace loom::cuda
