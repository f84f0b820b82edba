// File: core/cudnn/tensor_spec.cc
// From a device tensor (Strided) to the TensorSpec cuDNN sees.
#include "core/cudnn/tensor_spec.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace loom::cudnn {

cudnnDataType_t cudnn_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::Int32: return CUDNN_DATA_INT32;
    case DType::Int64: return CUDNN_DATA_INT64;
    case DType::UInt8: return CUDNN_DATA_UINT8;
    case DType::Bool: return CUDNN_DATA_BOOLEAN;
  }
  return CUDNN_DATA_FLOAT;
}

int64_t pointer_alignment(const void* ptr) {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  int64_t alignment = kFullAlignment;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

bool fully_aligned(const Graph& graph) {
  return std::all_of(graph.tensors().begin(), graph.tensors().end(), [](const TensorSpec& t) {
    return t.is_virtual || t.by_value || t.alignment >= kFullAlignment;
  });
}

bool channels_last_only(const Shape& sizes, const Shape& strides) {
  return sizes.size() == 4 && strides.size() == 4 && has_layout(sizes, strides, MemoryFormat::ChannelsLast) &&
         !has_layout(sizes, strides, MemoryFormat::Contiguous);
}

TensorSpec spec_of(const Strided& t, int64_t uid) {
  MemoryFormat format = channels_last_only(t.sizes, t.strides) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  LOOM_CHECK(has_layout(t.sizes, t.strides, format), ValueError,
             "[cudnn] tensor {} with strides {} is neither dense NCHW nor dense NHWC; make it "
             "contiguous first",
             shape_str(t.sizes), shape_str(t.strides));
  return {.uid = uid,
          .dims = t.sizes,
          .strides = strides_for(t.sizes, format),
          .dtype = cudnn_dtype(t.dtype),
          .alignment = pointer_alignment(t.data)};
}

TensorSpec channel_spec(int64_t channels, int64_t uid, const void* ptr) {
  return {.uid = uid,
          .dims = {1, channels, 1, 1},
          .strides = {channels, 1, 1, 1},
          .dtype = CUDNN_DATA_FLOAT,
          .alignment = pointer_alignment(ptr)};
}

TensorSpec virtual_like(const TensorSpec& like, int64_t uid) {
  TensorSpec v = like;
  v.uid = uid;
  v.dtype = CUDNN_DATA_FLOAT;
  v.is_virtual = true;
  return v;
}

TensorSpec scalar_spec(int64_t uid, double value_for_testing) {
  return {.uid = uid,
          .dims = {1, 1, 1, 1},
          .strides = {1, 1, 1, 1},
          .dtype = CUDNN_DATA_FLOAT,
          .alignment = 4,
          .by_value = true,
          .scalar_for_testing = value_for_testing};
}

std::string describe(const Strided& t) {
  return fmt::format("{}{} {}", shape_str(t.sizes), channels_last_only(t.sizes, t.strides) ? " nhwc" : "",
                     dtype_name(t.dtype));
}

}  // namespace loom::cudnn
