// File: core/cuda/sort_kernels.h
// Launchers for the row sorts and running sums and products in sort.cu. They return the
// launch status; core/cuda/sort.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/kernel/reduce.h"
#include "core/strided.h"

namespace loom::cuda {

// The scratch launch_sort_rows needs for keys (rows, n) of keys' dtype.
size_t sort_rows_scratch_bytes(const Strided& keys);

// indices (rows, n) int64 <- the positions that put each row of keys (rows, n)
// in order, stably: NaN counts as greater than every number and -0 as equal to
// +0 (torch.sort). Both contiguous; keys of any dtype; scratch of
// sort_rows_scratch_bytes(keys) bytes.
cudaError_t launch_sort_rows(const Strided& indices, const Strided& keys, bool descending, void* scratch,
                             size_t scratch_bytes, cudaStream_t stream);

// out <- the running sum or product (`op`) of in along the middle dim of
// (outer, n, inner), both contiguous and of one dtype, from the end when
// `reverse`. 16-bit floats accumulate in float; integers wrap around.
cudaError_t launch_scan(const Strided& out, const Strided& in, int64_t outer, int64_t n, int64_t inner,
                        kernel::ScanOp op, bool reverse, cudaStream_t stream);

}  // namespace loom::cuda
