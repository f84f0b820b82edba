// File: core/cuda/runtime.cc
// Device discovery and guards, device memory through the caching allocator, the
// pinned host<->device and device<->device copies, and the copy kernels' launches.
#include "core/cuda/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>

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

int current_device() {
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

DeviceGuard::DeviceGuard(int device) : device_(device), previous_(current_device()) {
  if (previous_ != device_) LOOM_CUDA_CHECK(cudaSetDevice(device_));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ != device_) cudaSetDevice(previous_);
}

// Routed through the caching allocator, so cuDNN workspaces share its cache,
// its statistics and its out-of-memory retry, and obey the capture rules.
void* malloc_device(size_t nbytes, int device) { return allocate(nbytes, device); }

void free_device(void* ptr, int) noexcept { deallocate(ptr); }

namespace {

// Host <-> device copies go through two pinned staging halves per thread and GPU: from
// pageable memory the driver would stage synchronously in small pieces; here a
// chunk's memcpy into one half overlaps the DMA of the other half.
constexpr size_t kStagingChunk = 4u << 20;

class PinnedStaging {
 public:
  PinnedStaging() {
    LOOM_CUDA_CHECK(cudaHostAlloc(&buffer_, 2 * kStagingChunk, cudaHostAllocDefault));
    for (cudaEvent_t& e : done_) LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  // Kept for the thread's lifetime, like the stream it serves.
  char* half(int i) { return static_cast<char*>(buffer_) + i * kStagingChunk; }
  cudaEvent_t done(int i) { return done_[i]; }

 private:
  void* buffer_ = nullptr;
  cudaEvent_t done_[2] = {};
};

// The current device's: the events belong to the device they were made on.
PinnedStaging& staging() {
  thread_local PerDevice<PinnedStaging> s;
  return s.current();
}

// An event recorded now on the calling thread's stream on `device`.
cudaEvent_t record_event(int device) {
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaEventRecord(event, current_stream()));
  return event;
}

// Later work on the calling thread's stream on `device` waits for `event`,
// which then goes (CUDA frees it once it has completed).
void wait_and_destroy(int device, cudaEvent_t event) {
  DeviceGuard guard(device);
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), event, 0));
  LOOM_CUDA_CHECK(cudaEventDestroy(event));
}

}  // namespace

void copy_to_host(void* dst, const void* src, size_t nbytes) {
  LOOM_CHECK(!is_capturing(), CudaError,
             "[copy_to_host] reading {} bytes of GPU memory back to the host (item(), to(Device::cpu()), a "
             "check that reads values) while a CUDA graph is being captured: a replay would not read them "
             "again; read the result after the captured work", nbytes);
  PinnedStaging& s = staging();
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  size_t pending = 0, pending_len = 0;  // the chunk whose DMA is in flight
  int half = 0;
  for (size_t offset = 0; offset < nbytes; offset += kStagingChunk, half ^= 1) {
    size_t len = std::min(kStagingChunk, nbytes - offset);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(s.half(half), in + offset, len, cudaMemcpyDeviceToHost, current_stream()));
    LOOM_CUDA_CHECK(cudaEventRecord(s.done(half), current_stream()));
    if (offset > 0) {  // drain the previous chunk while this one transfers
      LOOM_CUDA_CHECK(cudaEventSynchronize(s.done(half ^ 1)));
      std::memcpy(out + pending, s.half(half ^ 1), pending_len);
    }
    pending = offset;
    pending_len = len;
  }
  if (nbytes > 0) {
    LOOM_CUDA_CHECK(cudaEventSynchronize(s.done(half ^ 1)));
    std::memcpy(out + pending, s.half(half ^ 1), pending_len);
  }
}

// Captured, the copy would read the pinned staging buffer at each replay, by
// then overwritten by later copies, and the staging events' waits would fail.
void copy_to_device(void* dst, const void* src, size_t nbytes) {
  LOOM_CHECK(!is_capturing(), CudaError,
             "[copy_to_device] copying {} bytes of host data to the GPU (tensor(...), from_host, "
             "to(Device::cuda(i)) of a CPU tensor) while a CUDA graph is being captured: a replay would not "
             "copy them again; make the tensor on the GPU before the captured work and reuse it", nbytes);
  PinnedStaging& s = staging();
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  int half = 0;
  for (size_t offset = 0; offset < nbytes; offset += kStagingChunk, half ^= 1) {
    size_t len = std::min(kStagingChunk, nbytes - offset);
    LOOM_CUDA_CHECK(cudaEventSynchronize(s.done(half)));  // this half's last DMA has finished
    std::memcpy(s.half(half), in + offset, len);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(out + offset, s.half(half), len, cudaMemcpyHostToDevice, current_stream()));
    LOOM_CUDA_CHECK(cudaEventRecord(s.done(half), current_stream()));
  }
  // The caller's host buffer is free to go once we return; the staging halves
  // are ours, so only their reuse has to wait (above), not this return.
}

void copy_between_devices(void* dst, int dst_device, const void* src, int src_device,
                          size_t nbytes) {
  if (nbytes == 0) return;
  wait_and_destroy(dst_device, record_event(src_device));  // src is written
  {
    DeviceGuard guard(dst_device);
    LOOM_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes,
                                        current_stream()));
  }
  // src's memory is reused in its stream's order: only after the copy has read it.
  wait_and_destroy(src_device, record_event(dst_device));
}

void copy(const Strided& dst, const Strided& src) {
  check_kernel_rank(dst, "copy");
  check_kernel_rank(src, "copy");
  LOOM_CUDA_CHECK(launch_copy(dst, src, current_stream()));
}

namespace {
std::atomic<int64_t> span_launches{0};
std::atomic<int64_t> copy_launches{0};

// launch(first, count) for each run of at most kMaxSpansPerLaunch spans, each
// run counted in `launches`.
template <class Launch>
void launch_in_batches(const std::vector<DenseSpan>& spans, std::atomic<int64_t>& launches,
                       Launch launch) {
  for (size_t first = 0; first < spans.size(); first += kMaxSpansPerLaunch) {
    const int count = static_cast<int>(std::min<size_t>(kMaxSpansPerLaunch, spans.size() - first));
    launch(spans.data() + first, count);
    ++launches;
  }
}
}  // namespace

void convert_spans(const std::vector<DenseSpan>& spans, DType dst_dtype, DType src_dtype) {
  LOOM_CHECK(is_floating(dst_dtype) && is_floating(src_dtype), ValueError,
             "[convert_spans] converts between floating dtypes, got {} to {}; use copy()",
             dtype_name(src_dtype), dtype_name(dst_dtype));
  launch_in_batches(spans, span_launches, [&](const DenseSpan* first, int count) {
    LOOM_CUDA_CHECK(launch_convert_spans(first, count, dst_dtype, src_dtype, current_stream()));
  });
}

int64_t convert_span_launches() { return span_launches.load(); }

void copy_spans(const std::vector<DenseSpan>& spans) {
  launch_in_batches(spans, copy_launches, [&](const DenseSpan* first, int count) {
    LOOM_CUDA_CHECK(launch_copy_spans(first, count, current_stream()));
  });
}

int64_t copy_span_launches() { return copy_launches.load(); }

void fill(const Strided& dst, double value) {
  check_kernel_rank(dst, "fill");
  LOOM_CUDA_CHECK(launch_fill(dst, value, current_stream()));
}

void arange(const Strided& dst, double start, double step) {
  LOOM_CHECK(dst.dim() == 1 && (dst.sizes[0] <= 1 || dst.strides[0] == 1), ValueError,
             "[arange] the output must be dense and 1-D, got sizes {} and strides {}", shape_str(dst.sizes),
             shape_str(dst.strides));
  LOOM_CUDA_CHECK(launch_arange(dst.data, dst.dtype, dst.numel(), start, step, current_stream()));
}

}  // namespace loom::cuda
