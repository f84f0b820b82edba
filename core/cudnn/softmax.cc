// File: core/cudnn/softmax.cc
// The legacy cuDNN softmax calls over an (outer, C, inner, 1) view, split into
// slabs of whole rows where the tensor has more elements than cuDNN's int dims
// can count.
#include "core/cudnn/softmax.h"

#include <algorithm>
#include <climits>
#include <memory>

#include "core/cudnn/backend.h"
#include "core/cudnn/context.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

enum class SoftmaxKind { Softmax, LogSoftmax };

cudnnSoftmaxAlgorithm_t algorithm_of(SoftmaxKind kind) {
  return kind == SoftmaxKind::LogSoftmax ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
}

const char* op_name(SoftmaxKind kind) {
  return kind == SoftmaxKind::LogSoftmax ? "log_softmax" : "softmax";
}

// cuDNN reads alpha and beta as double for double tensors, as float otherwise.
struct Scale {
  float single;
  double wide;
  const void* as(DType dtype) const {
    return dtype == DType::Float64 ? static_cast<const void*>(&wide) : &single;
  }
};
constexpr Scale kOne{1.0f, 1.0}, kZero{0.0f, 0.0};

void check_contiguous(const Strided& t, SoftmaxKind kind, const char* name) {
  LOOM_CHECK(has_layout(t.sizes, t.strides, MemoryFormat::Contiguous), ValueError,
             "[{}] cuDNN softmax needs a contiguous (row-major) {}, got shape {} with strides {}; "
             "call .contiguous() on it first",
             op_name(kind), name, shape_str(t.sizes), shape_str(t.strides));
}

// (outer, C, inner): the dims before `dim`, `dim` itself, and the dims after.
struct SoftmaxView {
  int64_t outer = 1, classes = 1, inner = 1;
};

SoftmaxView view_of(const Strided& t, int64_t dim) {
  SoftmaxView v;
  if (t.dim() == 0) return v;
  for (int64_t d = 0; d < dim; ++d) v.outer *= t.sizes[d];
  v.classes = t.sizes[dim];
  for (int64_t d = dim + 1; d < t.dim(); ++d) v.inner *= t.sizes[d];
  return v;
}

struct DescriptorDeleter {
  void operator()(cudnnTensorDescriptor_t d) const { cudnnDestroyTensorDescriptor(d); }
};
using TensorDescriptor = std::unique_ptr<cudnnTensorStruct, DescriptorDeleter>;

// A packed NCHW (rows, C, inner, 1) descriptor.
TensorDescriptor descriptor_of(DType dtype, int64_t rows, const SoftmaxView& v) {
  cudnnTensorDescriptor_t raw = nullptr;
  LOOM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&raw));
  TensorDescriptor descriptor(raw);
  const cudnnDataType_t type = dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  LOOM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(raw, CUDNN_TENSOR_NCHW, type, static_cast<int>(rows),
                                              static_cast<int>(v.classes),
                                              static_cast<int>(v.inner), 1));
  return descriptor;
}

// Calls fn(descriptor, element offset) for consecutive slabs of whole outer
// rows, each small enough for cuDNN's int sizes and strides. t is not empty.
template <class Fn>
void for_each_slab(const Strided& t, int64_t dim, SoftmaxKind kind, Fn&& fn) {
  const SoftmaxView v = view_of(t, dim);
  const int64_t row = v.classes * v.inner;  // elements per outer index
  LOOM_CHECK(row <= INT_MAX, ValueError,
             "[{}] cuDNN softmax takes at most {} elements from dim {} on, got {} (shape {})",
             op_name(kind), INT_MAX, dim, row, shape_str(t.sizes));
  const int64_t rows_per_slab = INT_MAX / row;
  for (int64_t first = 0; first < v.outer; first += rows_per_slab) {
    const int64_t rows = std::min(rows_per_slab, v.outer - first);
    const TensorDescriptor descriptor = descriptor_of(t.dtype, rows, v);
    fn(descriptor.get(), first * row);
  }
}

// The element `offset` elements past t's first one.
void* at(const Strided& t, int64_t offset) {
  return static_cast<char*>(t.data) + offset * static_cast<int64_t>(element_size(t.dtype));
}

void forward(const Strided& y, const Strided& x, int64_t dim, SoftmaxKind kind) {
  if (x.numel() == 0) return;
  check_contiguous(x, kind, "input");
  check_contiguous(y, kind, "output");
  for_each_slab(x, dim, kind, [&](cudnnTensorDescriptor_t desc, int64_t offset) {
    LOOM_CUDNN_CHECK(cudnnSoftmaxForward(handle(), algorithm_of(kind), CUDNN_SOFTMAX_MODE_CHANNEL,
                                         kOne.as(x.dtype), desc, at(x, offset), kZero.as(x.dtype),
                                         desc, at(y, offset)));
  });
}

void backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim,
              SoftmaxKind kind) {
  if (y.numel() == 0) return;
  check_contiguous(y, kind, "forward output");
  check_contiguous(dy, kind, "output gradient");
  check_contiguous(dx, kind, "input gradient");
  for_each_slab(y, dim, kind, [&](cudnnTensorDescriptor_t desc, int64_t offset) {
    LOOM_CUDNN_CHECK(cudnnSoftmaxBackward(handle(), algorithm_of(kind), CUDNN_SOFTMAX_MODE_CHANNEL,
                                          kOne.as(y.dtype), desc, at(y, offset), desc,
                                          at(dy, offset), kZero.as(y.dtype), desc, at(dx, offset)));
  });
}

}  // namespace

void softmax_forward(const Strided& y, const Strided& x, int64_t dim) {
  forward(y, x, dim, SoftmaxKind::Softmax);
}

void softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim) {
  backward(dx, dy, y, dim, SoftmaxKind::Softmax);
}

void log_softmax_forward(const Strided& y, const Strided& x, int64_t dim) {
  forward(y, x, dim, SoftmaxKind::LogSoftmax);
}

void log_softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim) {
  backward(dx, dy, y, dim, SoftmaxKind::LogSoftmax);
}

}  // namespace loom::cudnn
