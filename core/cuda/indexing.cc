// File: core/cuda/indexing.cc
// Checked launches of the gather, scatter and scatter-add kernels on the current stream.
#include "core/cuda/indexing.h"

#include "core/cuda/indexing_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

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

void scatter_add_sorted(const Strided& out_base, int64_t out_dim_stride, int64_t dim, const Strided& index,
                        const Strided& src) {
  check_kernel_rank(src, "scatter_add");
  const Shape dense = contiguous_strides(src.sizes);
  LOOM_CHECK(is_floating(src.dtype) && index.sizes == src.sizes && index.strides == dense && src.strides == dense &&
                 dim >= 0 && dim < static_cast<int64_t>(src.sizes.size()),
             ValueError, "[scatter_add] the sorted kernel takes contiguous index and src {} {} of one shape and a "
             "floating dtype, along a dim of theirs (got index {}, dim {})",
             shape_str(src.sizes), dtype_name(src.dtype), shape_str(index.sizes), dim);
  LOOM_CUDA_CHECK(
      launch_scatter_add_sorted(out_base, out_dim_stride, dim, index, src, current_stream()));
}

void scatter(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
             const Strided& src) {
  check_kernel_rank(src, "scatter");
  LOOM_CUDA_CHECK(launch_scatter(out_base, out_dim_stride, index, src, current_stream()));
}

}  // namespace loom::cuda
