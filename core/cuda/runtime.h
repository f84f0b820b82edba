// File: core/cuda/runtime.h
// The CUDA runtime layer: device discovery, device memory, host<->device copies
// and the checked launch of the basic kernels. Every CUDA call goes through
// LOOM_CUDA_CHECK, which throws loom::CudaError naming the statement and file:line.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cuda/copy_kernels.h"
#include "core/strided.h"

namespace loom::cuda {

// Throws CudaError (OutOfMemoryError for cudaErrorMemoryAllocation) unless ok.
void check_status(cudaError_t status, const char* statement, const char* file, int line);

// GPUs usable by this process; 0 where there is no driver or no device.
int device_count();

// Device memory on GPU `device`, from the caching allocator (see allocator.h:
// a freed buffer is reused in stream order; OutOfMemoryError after a retry).
void* malloc_device(size_t nbytes, int device);
void free_device(void* ptr, int device) noexcept;

// Synchronous for the host side: copy_to_host returns with dst filled;
// copy_to_device returns once src has been read (the device copy is ordered
// on the current stream). Both stage through pinned host memory.
void copy_to_host(void* dst, const void* src, size_t nbytes);
void copy_to_device(void* dst, const void* src, size_t nbytes);

// Throws ValueError naming `op` when `t` has more dims than CUDA kernels take
// (kMaxDims); every host wrapper of a kernel calls it for each operand.
void check_kernel_rank(const Strided& t, const char* op);

// Strided device kernels (see copy_kernels.h), checked.
void copy(const Strided& dst, const Strided& src);
void fill(const Strided& dst, double value);

// dst = convert(src) for every span (dense arrays, floating dtypes), one launch
// per kMaxSpansPerLaunch spans: many small conversions (a model's weight casts
// under autocast, their gradients) cost a launch or two instead of one each.
void convert_spans(const std::vector<DenseSpan>& spans, DType dst_dtype, DType src_dtype);
// Launches convert_spans has made in this process (tests check the batching).
int64_t convert_span_launches();

// Copies every span's bytes (numel counts bytes here), one launch per
// kMaxSpansPerLaunch spans: a training step's input batch and targets in one.
void copy_spans(const std::vector<DenseSpan>& spans);
// Launches copy_spans has made in this process.
int64_t copy_span_launches();

}  // namespace loom::cuda

#define LOOM_CUDA_CHECK(statement) \
  ::loom::cuda::check_status((statement), #statement, __FILE__, __LINE__)
