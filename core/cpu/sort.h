// File: core/cpu/sort.h
// Row sorts and running sums and products: the CPU twins of core/cuda/sort.h,
// and the reference the GPU tests compare them with.
#pragma once

#include <cstdint>

#include "core/kernel/reduce.h"
#include "core/strided.h"

namespace loom::cpu {

// indices (rows, n) int64 <- the positions that put each row of keys (rows, n)
// in order, stably (equal keys keep their order, descending included): NaN
// counts as greater than every number and -0 as equal to +0, as torch.sort.
// Both contiguous; keys of any dtype.
void sort_rows(const Strided& indices, const Strided& keys, bool descending);

// out <- the running sum or product (`op`) of in along `dim` (from its end when
// `reverse`), both of one dtype and shape, any strides. Floating values
// accumulate in their own dtype, element after element (as PyTorch's CPU
// cumsum and cumprod); integers wrap around as integer arithmetic does.
void scan_along(const Strided& out, const Strided& in, int64_t dim, kernel::ScanOp op, bool reverse);

}  // namespace loom::cpu
