// File: core/cuda/blas.h
// The cuBLAS side of GPU matrix products (matmul.h): the thread's handle and
// the check macro for every cuBLAS call.
#pragma once

#include <cublas_v2.h>

#include "core/cuda/matmul.h"

namespace loom::cuda {

// Throws CudaError naming the statement, file:line and cuBLAS's status string,
// unless status is CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t status, const char* statement, const char* file, int line);

// This thread's cuBLAS handle (made on first use, kept for the thread's life),
// bound to current_stream() and to a fixed workspace of the thread's own, so
// that its calls can be captured into a CUDA graph. The first call of a thread
// must not happen during a capture.
cublasHandle_t blas_handle();

}  // namespace loom::cuda

#define LOOM_CUBLAS_CHECK(statement) \
  ::loom::cuda::check_cublas((statement), #statement, __FILE__, __LINE__)
