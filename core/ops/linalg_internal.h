// File: core/ops/linalg_internal.h
// What linear (linalg.cc) shares with the fused linear ops (fused.cc,
// fusion.cc): its argument checks. Private to core/ops.
#pragma once

#include "core/tensor.h"

namespace loom::linalg_detail {

// x (*, in), weight (out, in), bias (out) or undefined; throws with "[linear] ..." messages.
void check_linear_args(const Tensor& x, const Tensor& weight, const Tensor& bias);

}  // namespace loom::linalg_detail
