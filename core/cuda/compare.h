// File: core/cuda/compare.h
// The GPU twins of core/cpu/compare.h: same signatures and semantics, queued
// on cuda::current_stream().
#pragma once

#include "core/kernel/compare.h"
#include "core/strided.h"

namespace loom::cuda {

using kernel::CompareOp;

void compare(const Strided& out, const Strided& a, const Strided& b, CompareOp op);
void compare_scalar(const Strided& out, const Strided& a, double scalar, CompareOp op);
void isclose(const Strided& out, const Strided& a, const Strided& b, double rtol, double atol,
             bool equal_nan);
void where(const Strided& out, const Strided& cond, const Strided& a, const Strided& b);

}  // namespace loom::cuda
