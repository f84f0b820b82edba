#include "core/cuda/runtime.h"

#include <fmt/format.h>

#include "core/cuda/kernels.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

void check_rank(const Strided& t, const char* op) {
  LOOM_CHECK(t.sizes.size() <= kMaxDims, ValueError,
             "[{}] CUDA kernels take at most {} dims, got shape {}", op, kMaxDims,
             shape_str(t.sizes));
}

std::string mib(size_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

}  // namespace

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

void* malloc_device(size_t nbytes, int device) {
  int count = device_count();
  LOOM_CHECK(count > 0, DeviceError,
             "[cuda] no CUDA GPU is usable on this machine; create tensors on Device::cpu()");
  LOOM_CHECK(device >= 0 && device < count, DeviceError,
             "[cuda] device cuda:{} does not exist ({} GPU(s) visible)", device, count);
  LOOM_CUDA_CHECK(cudaSetDevice(device));
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, nbytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw OutOfMemoryError(fmt::format(
        "[cuda] out of memory: tried to allocate {} on cuda:{} ({} free of {}); free tensors "
        "or use a smaller batch",
        mib(nbytes), device, mib(free_bytes), mib(total_bytes)));
  }
  LOOM_CUDA_CHECK(status);
  return ptr;
}

void free_device(void* ptr, int device) noexcept {
  // A destructor must not throw; a failing cudaFree here means the context is gone.
  cudaSetDevice(device);
  cudaFree(ptr);
}

void copy_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  LOOM_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost));
}

void copy_to_device(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  LOOM_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice));
}

void copy(const Strided& dst, const Strided& src) {
  check_rank(dst, "copy");
  check_rank(src, "copy");
  LOOM_CUDA_CHECK(launch_copy(dst, src, nullptr));
}

void fill(const Strided& dst, double value) {
  check_rank(dst, "fill");
  LOOM_CUDA_CHECK(launch_fill(dst, value, nullptr));
}

void add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha) {
  check_rank(out, "add_scaled");
  LOOM_CUDA_CHECK(launch_add_scaled(out, a, b, alpha, nullptr));
}

}  // namespace loom::cuda
