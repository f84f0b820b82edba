// File: core/cuda/runtime.h
// The CUDA runtime layer: device discovery, device memory, host<->device copies
// and the checked launch of the basic kernels. Every CUDA call goes through
// LOOM_CUDA_CHECK, which throws loom::CudaError naming the statement and file:line.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/strided.h"

namespace loom::cuda {

// Throws CudaError (OutOfMemoryError for cudaErrorMemoryAllocation) unless ok.
void check_status(cudaError_t status, const char* statement, const char* file, int line);

// GPUs usable by this process; 0 where there is no driver or no device.
int device_count();

// Device memory on GPU `device` (synchronous cudaMalloc / cudaFree for now).
// Out of memory raises OutOfMemoryError with the requested and free sizes; the
// process can go on after freeing tensors.
void* malloc_device(size_t nbytes, int device);
void free_device(void* ptr, int device) noexcept;

void copy_to_host(void* dst, const void* src, size_t nbytes);
void copy_to_device(void* dst, const void* src, size_t nbytes);

// Strided device kernels (see kernels.h), checked.
void copy(const Strided& dst, const Strided& src);
void fill(const Strided& dst, double value);
void add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha);

}  // namespace loom::cuda

#define LOOM_CUDA_CHECK(statement) \
  ::loom::cuda::check_status((statement), #statement, __FILE__, __LINE__)
