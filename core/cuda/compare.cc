// File: core/cuda/compare.cc
// Checked launches of the comparison and selection kernels on the current stream.
#include "core/cuda/compare.h"

#include "core/cuda/compare_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void compare(const Strided& out, const Strided& a, const Strided& b, CompareOp op) {
  check_kernel_rank(out, "compare");
  LOOM_CUDA_CHECK(launch_compare(out, a, b, op, current_stream()));
}

void compare_scalar(const Strided& out, const Strided& a, double scalar, CompareOp op) {
  check_kernel_rank(out, "compare_scalar");
  LOOM_CUDA_CHECK(launch_compare_scalar(out, a, scalar, op, current_stream()));
}

void isclose(const Strided& out, const Strided& a, const Strided& b, double rtol, double atol,
             bool equal_nan) {
  check_kernel_rank(out, "isclose");
  LOOM_CUDA_CHECK(launch_isclose(out, a, b, rtol, atol, equal_nan, current_stream()));
}

void where(const Strided& out, const Strided& cond, const Strided& a, const Strided& b) {
  check_kernel_rank(out, "where");
  LOOM_CUDA_CHECK(launch_where(out, cond, a, b, current_stream()));
}

}  // namespace loom::cuda
