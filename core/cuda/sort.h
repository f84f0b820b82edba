// File: core/cuda/sort.h
// The GPU twins of core/cpu/sort.h (row sorts and running sums), same
// signatures and orders; work is queued on cuda::current_stream(). A float32
// running sum along the innermost dim adds 32 elements at a time in a tree, so
// it may differ from the CPU's element-after-element sum in the last bits.
#pragma once

#include <cstdint>

#include "core/strided.h"

namespace loom::cuda {

void sort_rows(const Strided& indices, const Strided& keys, bool descending);
void cumsum_along(const Strided& out, const Strided& in, int64_t dim, bool reverse);

}  // namespace loom::cuda
