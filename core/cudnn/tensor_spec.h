// File: core/cudnn/tensor_spec.h
// From a device tensor (Strided) to the TensorSpec cuDNN sees.
#pragma once

#include <string>

#include "core/cudnn/graph.h"
#include "core/strided.h"

namespace loom::cudnn {

cudnnDataType_t cudnn_dtype(DType dtype);

// Largest power of two (at most 16) dividing the pointer: what BYTE_ALIGNMENT may promise.
int64_t pointer_alignment(const void* ptr);

// dims = sizes; strides canonical for the tensor's dense layout (NHWC when its
// strides say channels-last, else row-major), so size-1 dims cannot make cuDNN
// misread the layout. The tensor must be dense in one of those two layouts.
TensorSpec spec_of(const Strided& t, int64_t uid);

// A (1, C, 1, 1) fp32 per-channel tensor (BN scale, bias, statistics).
TensorSpec channel_spec(int64_t channels, int64_t uid, const void* ptr);

// A (1, 1, 1, 1) by-value fp32 scalar (epsilon, momentum).
TensorSpec scalar_spec(int64_t uid, double value_for_testing);

// "(8, 3, 32, 32) nhwc float32": for graph names in the plan-cache listing.
std::string describe(const Strided& t);

}  // namespace loom::cudnn
