// File: core/cuda/sort.h
// The GPU twins of core/cpu/sort.h (row sorts, running sums and products),
// same signatures and orders; work is queued on cuda::current_stream(). A
// float32 running sum or product along the innermost dim combines 32 elements
// at a time in a tree, so it may differ from the CPU's element-after-element
// one in the last bits.
#pragma once

#include <cstdint>

#include "core/kernel/reduce.h"
#include "core/strided.h"

namespace loom::cuda {

void sort_rows(const Strided& indices, const Strided& keys, bool descending);
void scan_along(const Strided& out, const Strided& in, int64_t dim, kernel::ScanOp op, bool reverse);

}  // namespace loom::cuda
