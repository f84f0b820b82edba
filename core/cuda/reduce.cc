// File: core/cuda/reduce.cc
// Checked launches of the reduction kernels on the current stream.
#include "core/cuda/reduce.h"

#include "core/cuda/allocator.h"
#include "core/cuda/reduce_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void reduce(const Strided& out, const Strided& in, ReduceOp op) {
  check_kernel_rank(in, "reduce");
  LOOM_CUDA_CHECK(launch_with_scratch(reduce_scratch_bytes(out, in), [&](void* scratch) {
    return launch_reduce(out, in, op, scratch, current_stream());
  }));
}

void max_along(const Strided& values, const Strided& indices, const Strided& in, int64_t dim) {
  check_kernel_rank(in, "max_along");
  LOOM_CUDA_CHECK(launch_with_scratch(max_along_scratch_bytes(in, dim), [&](void* scratch) {
    return launch_max_along(values, indices, in, dim, scratch, current_stream());
  }));
}

void scatter_add_along(const Strided& dx, const Strided& dy, const Strided& indices, int64_t dim) {
  check_kernel_rank(dx, "scatter_add_along");
  LOOM_CUDA_CHECK(launch_scatter_add_along(dx, dy, indices, dim, current_stream()));
}

}  // namespace loom::cuda
