// File: core/cudnn/tensor_spec.h
// From a device tensor (Strided) to the TensorSpec cuDNN sees.
#pragma once

#include <string>

#include "core/cudnn/graph.h"
#include "core/strided.h"

namespace loom::cudnn {

cudnnDataType_t cudnn_dtype(DType dtype);

// Largest power of two (at most kFullAlignment) dividing the pointer: what
// BYTE_ALIGNMENT may promise. Every spec below takes its alignment from here.
int64_t pointer_alignment(const void* ptr);

// Whether every tensor bound to a pointer (neither virtual nor by value)
// declares kFullAlignment bytes. Ops run only such graphs on cuDNN's engines.
// Measured on the H100 (cuDNN 9.19): ReLU (pointwise graph), average and max
// pooling called directly on channels-last views whose pointers were 4-byte
// aligned and declared as such (batch 128) ended in cudaErrorMisalignedAddress,
// a sticky error that loses the process, with no kernel cache involved. A
// plan's test run binds fresh 512-byte-aligned scratch, so it cannot catch such
// an engine, and a test run at the declared alignment would fault the same way.
// So the ops run under-aligned tensors on their tier below (Loom CUDA kernels)
// or, for conv, whose tier below is cuDNN too, on 16-byte-aligned copies.
bool fully_aligned(const Graph& graph);

// A 4-d layout that only NHWC describes: dense channels-last and not dense
// NCHW. A tensor dense in both (a depthwise filter (C, 1, R, S), a 1 x 1 map)
// is not: it takes the layout of the operands beside it (Graph::one_layout).
bool channels_last_only(const Shape& sizes, const Shape& strides);

// dims = sizes; alignment from the data pointer; strides canonical for the
// tensor's dense layout (NHWC when its strides say channels-last, else
// row-major), so size-1 dims cannot make cuDNN misread the layout. The tensor
// must be dense in one of those two layouts.
TensorSpec spec_of(const Strided& t, int64_t uid);

// A (1, C, 1, 1) fp32 per-channel tensor (BN scale, bias, statistics).
TensorSpec channel_spec(int64_t channels, int64_t uid, const void* ptr);

// An fp32 virtual intermediate laid out as `like` (what runtime-fused engines
// compute in), under its own uid.
TensorSpec virtual_like(const TensorSpec& like, int64_t uid);

// A (1, 1, 1, 1) by-value fp32 scalar (epsilon, momentum).
TensorSpec scalar_spec(int64_t uid, double value_for_testing);

// "(8, 3, 32, 32) nhwc float32": for graph names in the plan-cache listing.
std::string describe(const Strided& t);

}  // namespace loom::cudnn
