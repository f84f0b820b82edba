// File: core/cuda/indexing.cc
// Checked launches of the gather, scatter and scatter-add kernels on the current stream.
#include "core/cuda/indexing.h"

#include "core/cuda/indexing_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void gather(const Strided& out, const Strided& in_base, int64_t in_dim_stride,
            const Strided& index) {
  check_kernel_rank(out, "gather");
  LOOM_CUDA_CHECK(launch_gather(out, in_base, in_dim_stride, index, current_stream()));
}

void scatter_add(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
                 const Strided& src) {
  check_kernel_rank(src, "scatter_add");
  LOOM_CUDA_CHECK(launch_scatter_add(out_base, out_dim_stride, index, src, current_stream()));
}

void scatter(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
             const Strided& src) {
  check_kernel_rank(src, "scatter");
  LOOM_CUDA_CHECK(launch_scatter(out_base, out_dim_stride, index, src, current_stream()));
}

}  // namespace loom::cuda
