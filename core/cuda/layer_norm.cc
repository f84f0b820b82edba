// File: core/cuda/layer_norm.cc
// Checked launches of the layer-norm kernels on the current stream: the shapes,
// density and dtypes of layer_norm.h are checked here, so that a kernel never
// reads past an operand.
#include "core/cuda/layer_norm.h"

#include <utility>

#include "core/cuda/allocator.h"
#include "core/cuda/layer_norm_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

constexpr const char* kOp = "cuda::layer_norm";

// The dtype of mean and invstd for rows of `dtype`.
DType statistics_dtype(DType dtype) {
  return dtype == DType::BFloat16 || dtype == DType::Float16 ? DType::Float32 : dtype;
}

void check_rows(const Strided& t, int64_t n, int64_t d, DType dtype, const char* name) {
  LOOM_CHECK(t.dim() == 2 && t.sizes[0] == n && t.sizes[1] == d && (t.strides[1] == 1 || d <= 1) &&
                 (t.strides[0] == d || n <= 1),
             ShapeError, "[{}] {} must be dense ({}, {}) rows, got sizes {} strides {}", kOp, name, n, d,
             shape_str(t.sizes), shape_str(t.strides));
  LOOM_CHECK(t.dtype == dtype, TypeError, "[{}] {} is {} but x is {}; pass one dtype", kOp, name,
             dtype_name(t.dtype), dtype_name(dtype));
}

void check_vector(const Strided& t, int64_t size, DType dtype, const char* name) {
  LOOM_CHECK(t.dim() == 1 && t.sizes[0] == size && (t.strides[0] == 1 || size <= 1), ShapeError,
             "[{}] {} must be a dense vector of {}, got sizes {} strides {}", kOp, name, size, shape_str(t.sizes),
             shape_str(t.strides));
  LOOM_CHECK(t.dtype == dtype, TypeError, "[{}] {} must be {} (layer_norm.h says which dtype goes where), got {}",
             kOp, name, dtype_name(dtype), dtype_name(t.dtype));
}

void check_optional(const std::optional<Strided>& t, int64_t size, DType dtype, const char* name) {
  if (t) check_vector(*t, size, dtype, name);
}

// x is (N, D) of a floating dtype; returns {N, D}.
std::pair<int64_t, int64_t> rows_of(const Strided& x) {
  LOOM_CHECK(x.dim() == 2, ShapeError, "[{}] x must be (N, D) rows, got sizes {}", kOp, shape_str(x.sizes));
  LOOM_CHECK(is_floating(x.dtype), TypeError, "[{}] x must be a floating dtype, got {}", kOp, dtype_name(x.dtype));
  return {x.sizes[0], x.sizes[1]};
}

const Strided* pointer_or_null(const std::optional<Strided>& v) { return v ? &*v : nullptr; }

}  // namespace

void layer_norm_forward(const Strided& y, const Strided& mean, const Strided& invstd, const Strided& x,
                        const std::optional<Strided>& weight, const std::optional<Strided>& bias, double eps) {
  const auto [n, d] = rows_of(x);
  check_rows(x, n, d, x.dtype, "x");
  check_rows(y, n, d, x.dtype, "y");
  check_vector(mean, n, statistics_dtype(x.dtype), "mean");
  check_vector(invstd, n, statistics_dtype(x.dtype), "invstd");
  check_optional(weight, d, x.dtype, "weight");
  check_optional(bias, d, x.dtype, "bias");
  LOOM_CUDA_CHECK(launch_layer_norm_forward(y, mean, invstd, x, pointer_or_null(weight), pointer_or_null(bias), eps,
                                            current_stream()));
}

void layer_norm_backward(const Strided& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd, const std::optional<Strided>& weight) {
  const auto [n, d] = rows_of(x);
  check_rows(x, n, d, x.dtype, "x");
  check_rows(dy, n, d, x.dtype, "dy");
  check_rows(dx, n, d, x.dtype, "dx");
  check_vector(mean, n, statistics_dtype(x.dtype), "mean");
  check_vector(invstd, n, statistics_dtype(x.dtype), "invstd");
  check_optional(weight, d, x.dtype, "weight");
  check_optional(dweight, d, x.dtype, "dweight");
  check_optional(dbias, d, x.dtype, "dbias");
  const size_t scratch_bytes = dweight || dbias ? layer_norm_backward_scratch_bytes(x) : 0;
  LOOM_CUDA_CHECK(launch_with_scratch(scratch_bytes, [&](void* scratch) {
    return launch_layer_norm_backward(dx, pointer_or_null(dweight), pointer_or_null(dbias), dy, x, mean, invstd,
                                      pointer_or_null(weight), scratch, current_stream());
  }));
}

}  // namespace loom::cuda
