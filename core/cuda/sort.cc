// File: core/cuda/sort.cc
// Checked launches of the row sorts and running sums on the current stream.
#include "core/cuda/sort.h"

#include "core/cuda/allocator.h"
#include "core/cuda/runtime.h"
#include "core/cuda/sort_kernels.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/shape.h"

namespace loom::cuda {

void sort_rows(const Strided& indices, const Strided& keys, bool descending) {
  const size_t scratch_bytes = sort_rows_scratch_bytes(keys);
  LOOM_CUDA_CHECK(launch_with_scratch(scratch_bytes, [&](void* scratch) {
    return launch_sort_rows(indices, keys, descending, scratch, scratch_bytes, current_stream());
  }));
}

// The kernels take dense (outer, n, inner) lines; the ops layer passes
// contiguous operands.
void scan_along(const Strided& out, const Strided& in, int64_t dim, kernel::ScanOp op, bool reverse) {
  const Shape dense = contiguous_strides(in.sizes);
  LOOM_CHECK(in.strides == dense && out.strides == dense && out.sizes == in.sizes, ValueError,
             "[{}] the GPU kernel takes contiguous operands; call .contiguous() first",
             op == kernel::ScanOp::Sum ? "cumsum" : "cumprod");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.sizes[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(in.sizes.size()); ++d) inner *= in.sizes[d];
  const int64_t n = in.sizes.empty() ? 1 : in.sizes[dim];
  LOOM_CUDA_CHECK(launch_scan(out, in, outer, n, inner, op, reverse, current_stream()));
}

}  // namespace loom::cuda
