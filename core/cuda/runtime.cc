#include "core/cuda/runtime.h"

#include <fmt/format.h>

#include "core/cuda/allocator.h"
#include "core/cuda/copy_kernels.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

void check_kernel_rank(const Strided& t, const char* op) {
  LOOM_CHECK(t.sizes.size() <= kMaxDims, ValueError,
             "[{}] CUDA kernels take at most {} dims, got shape {}", op, kMaxDims,
             shape_str(t.sizes));
}

void check_status(cudaError_t status, const char* statement, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error so later calls can succeed
  std::string message = fmt::format("[cuda] {} failed at {}:{}: {} ({})", statement, file, line,
                                    cudaGetErrorName(status), cudaGetErrorString(status));
  if (status == cudaErrorMemoryAllocation) throw OutOfMemoryError(message);
  throw CudaError(message);
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU: a CPU-only machine, not an error
    return 0;
  }
  return count;
}

// Routed through the caching allocator, so cuDNN workspaces share its cache,
// its statistics and its out-of-memory retry, and obey the capture rules.
void* malloc_device(size_t nbytes, int device) { return allocate(nbytes, device); }

void free_device(void* ptr, int) noexcept { deallocate(ptr); }

void copy_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, current_stream()));
  synchronize();
}

void copy_to_device(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, current_stream()));
  synchronize();  // the host buffer may be freed as soon as we return
}

void copy(const Strided& dst, const Strided& src) {
  check_kernel_rank(dst, "copy");
  check_kernel_rank(src, "copy");
  LOOM_CUDA_CHECK(launch_copy(dst, src, current_stream()));
}

void fill(const Strided& dst, double value) {
  check_kernel_rank(dst, "fill");
  LOOM_CUDA_CHECK(launch_fill(dst, value, current_stream()));
}

}  // namespace loom::cuda
