// File: distributed/nccl_backend.cc
// CUDA collectives over NCCL, on the calling thread's current stream. The
// communicator is non-blocking (ncclConfig_t::blocking = 0), so that neither
// its setup nor an enqueue can hang on a dead peer: every NCCL call that
// answers ncclInProgress is polled with ncclCommGetAsyncError against the
// deadline, and a collective's completion is an event polled the same way. On
// a timeout the communicator is aborted (ncclCommAbort), which also ends the
// kernels still waiting for the peer. Every NCCL call goes through
// LOOM_NCCL_CHECK, every CUDA call through LOOM_CUDA_CHECK.
#include <fmt/format.h>

#include <cstring>
#include <optional>

#include "core/error.h"
#include "distributed/backend.h"

#ifdef LOOM_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#endif

namespace loom::distributed {

#ifdef LOOM_WITH_CUDA

namespace {

// ncclInProgress is not a failure on a non-blocking communicator: the caller
// polls until it resolves. Returns the status for that check.
ncclResult_t check_nccl(ncclResult_t status, ncclComm_t comm, const char* statement,
                        const char* file, int line) {
  if (status == ncclSuccess || status == ncclInProgress) return status;
  const char* last = ncclGetLastError(comm);
  throw DistError(fmt::format("[nccl] {} failed at {}:{}: {} ({}){}", statement, file, line,
                              ncclGetErrorString(status), static_cast<int>(status),
                              last && *last ? fmt::format("; NCCL says: {}", last) : ""));
}

#define LOOM_NCCL_CHECK(comm, statement) \
  check_nccl((statement), (comm), #statement, __FILE__, __LINE__)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::UInt8:
    case DType::Bool: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp reduce) { return reduce == ReduceOp::Avg ? ncclAvg : ncclSum; }

class NcclBackend;

class NcclWork final : public Work {
 public:
  NcclWork(NcclBackend& backend, cudaEvent_t event, std::string op)
      : backend_(backend), event_(event), op_(std::move(op)) {}
  ~NcclWork() override {
    if (event_) cudaEventDestroy(event_);
  }
  void wait() override;

 private:
  NcclBackend& backend_;
  cudaEvent_t event_;  // null: recorded into a CUDA graph, nothing to wait for
  std::string op_;
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(int rank, int size, const UniqueId& id, Device device, double timeout)
      : rank_(rank), size_(size), device_(device), timeout_(timeout) {
    cuda::DeviceGuard scope(device_.index);
    ncclUniqueId nccl_id;
    static_assert(sizeof(nccl_id.internal) == sizeof(id.bytes));
    std::memcpy(nccl_id.internal, id.bytes.data(), id.bytes.size());
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t status =
        LOOM_NCCL_CHECK(comm_, ncclCommInitRankConfig(&comm_, size_, nccl_id, rank_, &config));
    if (status == ncclInProgress) settle("ProcessGroup setup (ncclCommInitRankConfig)");
  }

  ~NcclBackend() override {
    if (last_launch_ != nullptr) cudaEventDestroy(last_launch_);
    if (comm_ == nullptr || aborted_) return;
    // Finalize flushes what is queued; a peer that died would hang it, so it
    // is polled like everything else and the communicator aborted on timeout.
    // Nothing may escape a destructor: a failure aborts the communicator.
    try {
      cuda::DeviceGuard scope(device_.index);
      if (LOOM_NCCL_CHECK(comm_, ncclCommFinalize(comm_)) == ncclInProgress) settle("finalize");
      ncclCommDestroy(comm_);
    } catch (const Error&) {
      abort();
    }
  }

  std::unique_ptr<Work> all_reduce(const Tensor& t, ReduceOp reduce, std::string_view op) override {
    return launch(op, [&](cudaStream_t stream) {
      return ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), nccl_type(t.dtype()),
                           nccl_op(reduce), comm_, stream);
    });
  }

  std::unique_ptr<Work> broadcast(const Tensor& t, int root) override {
    return launch("broadcast", [&](cudaStream_t stream) {
      return ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(), nccl_type(t.dtype()), root,
                           comm_, stream);
    });
  }

  std::unique_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override {
    return launch("all_gather", [&](cudaStream_t stream) {
      return ncclAllGather(input.raw_data(), output.raw_data(), input.numel(),
                           nccl_type(input.dtype()), comm_, stream);
    });
  }

  std::unique_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                       ReduceOp reduce) override {
    return launch("reduce_scatter", [&](cudaStream_t stream) {
      return ncclReduceScatter(input.raw_data(), output.raw_data(), output.numel(),
                               nccl_type(input.dtype()), nccl_op(reduce), comm_, stream);
    });
  }

  // NCCL has no barrier: a one-element all-reduce waited for on the host is one.
  void barrier() override {
    Tensor token = zeros({1}, {.device = device_});
    all_reduce(token, ReduceOp::Sum, "barrier")->wait();
  }

  std::vector<std::vector<int64_t>> gather_rows(const std::vector<int64_t>& row,
                                                std::string_view op) override {
    const int64_t n = static_cast<int64_t>(row.size());
    Tensor mine = from_host(row.data(), DType::Int64, {n}, {.dtype = DType::Int64, .device = device_});
    Tensor all = empty({size_ * n}, {.dtype = DType::Int64, .device = device_});
    launch(op, [&](cudaStream_t stream) {
      return ncclAllGather(mine.raw_data(), all.raw_data(), n, ncclInt64, comm_, stream);
    })->wait();
    std::vector<int64_t> values = all.to_vector<int64_t>();
    std::vector<std::vector<int64_t>> rows;
    for (int r = 0; r < size_; ++r) rows.emplace_back(values.begin() + r * n, values.begin() + (r + 1) * n);
    return rows;
  }

  // Polls until the communicator has no call in progress; aborts it and
  // throws DistError on an asynchronous NCCL error or at the deadline.
  void settle(std::string_view op) {
    poll_until([&] { return !in_progress(op); }, timeout_, [&] { return timed_out(op); });
  }

  // True while `event` (recorded after op) has not run; throws like settle.
  void wait_event(cudaEvent_t event, std::string_view op) {
    poll_until(
        [&] {
          cudaError_t status = cudaEventQuery(event);
          if (status == cudaSuccess) return true;
          if (status != cudaErrorNotReady) LOOM_CUDA_CHECK(status);
          in_progress(op);  // surfaces a peer's failure before the deadline
          return false;
        },
        timeout_, [&] { return timed_out(op); });
  }

 private:
  bool in_progress(std::string_view op) {
    check_usable(op);
    ncclResult_t state = ncclSuccess;
    LOOM_NCCL_CHECK(comm_, ncclCommGetAsyncError(comm_, &state));
    if (state == ncclInProgress) return true;
    if (state != ncclSuccess) {
      std::string reason = ncclGetErrorString(state);
      const char* last = ncclGetLastError(comm_);
      abort();
      throw DistError(fmt::format(
          "[{}] NCCL reported an asynchronous error on rank {} of {}: {}{}; a peer has "
          "probably failed. The communicator was aborted: end the job",
          op, rank_, size_, reason, last && *last ? fmt::format(" ({})", last) : ""));
    }
    return false;
  }

  std::string timed_out(std::string_view op) {
    abort();
    return peer_timeout_message(op, rank_, size_, timeout_, "NCCL on " + device_.str());
  }

  void check_usable(std::string_view op) const {
    LOOM_CHECK(!aborted_, DistError,
               "[{}] this process group's NCCL communicator was aborted after an earlier "
               "timeout or failure; end the job and start it again",
               op);
  }

  void abort() {
    if (aborted_ || comm_ == nullptr) return;
    aborted_ = true;
    ncclCommAbort(comm_);
  }

  template <class Enqueue>
  std::unique_ptr<Work> launch(std::string_view op, Enqueue enqueue) {
    check_usable(op);
    cuda::DeviceGuard scope(device_.index);
    cudaStream_t stream = cuda::current_stream();
    follow_last_launch(stream);
    if (LOOM_NCCL_CHECK(comm_, enqueue(stream)) == ncclInProgress) settle(op);
    LOOM_CUDA_CHECK(cudaEventRecord(last_launch_, stream));
    if (cuda::is_capturing()) return std::make_unique<NcclWork>(*this, nullptr, std::string(op));
    cudaEvent_t event = nullptr;
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    LOOM_CUDA_CHECK(cudaEventRecord(event, stream));
    return std::make_unique<NcclWork>(*this, event, std::string(op));
  }

  // NCCL gives no guarantee that two collectives of one communicator on two
  // streams both progress: run concurrently (a bucket all-reduce of DDP on its
  // stream, a SyncBatchNorm reduction on the compute stream) they can hang,
  // each rank's GPU having started a different one. So a launch on another
  // stream than the last one first waits for it: the communicator's
  // collectives run in issue order, which is the same on every rank. Within
  // one capture (or outside any), never across: a graph cannot wait on work
  // outside it, and that work is ordered before the capture began anyway.
  void follow_last_launch(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    LOOM_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id));
    const std::optional<unsigned long long> capture =
        status == cudaStreamCaptureStatusActive ? std::optional(id) : std::nullopt;
    if (last_launch_ == nullptr) {
      LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&last_launch_, cudaEventDisableTiming));
    } else if (last_stream_ != stream && last_capture_ == capture) {
      LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream, last_launch_, 0));
    }
    last_stream_ = stream;
    last_capture_ = capture;
  }

  int rank_, size_;
  Device device_;
  double timeout_;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  cudaEvent_t last_launch_ = nullptr;  // recorded after each launch
  cudaStream_t last_stream_ = nullptr;
  std::optional<unsigned long long> last_capture_;  // the id of its capture, if any
};

void NcclWork::wait() {
  if (event_ == nullptr) return;
  backend_.wait_event(event_, op_);
  LOOM_CUDA_CHECK(cudaEventDestroy(event_));
  event_ = nullptr;
}

}  // namespace

UniqueId UniqueId::create() {
  ncclUniqueId id;
  LOOM_NCCL_CHECK(nullptr, ncclGetUniqueId(&id));
  UniqueId out;
  std::memcpy(out.bytes.data(), id.internal, out.bytes.size());
  return out;
}

std::unique_ptr<Backend> make_nccl_backend(int rank, int size, const UniqueId& id, Device device,
                                           double timeout_seconds) {
  LOOM_CHECK(device.is_cuda() && device.index < cuda_device_count(), DeviceError,
             "[ProcessGroup] NCCL needs a usable GPU, got {} ({} GPUs usable here)", device.str(),
             cuda_device_count());
  return std::make_unique<NcclBackend>(rank, size, id, device, timeout_seconds);
}

#else  // a build without the CUDA backend has no NCCL

UniqueId UniqueId::create() {
  throw DeviceError(
      "[UniqueId::create] this build of Loom has no CUDA backend, so no NCCL; CPU tensors go "
      "over MPI (ProcessGroup::from_mpi)");
}

std::unique_ptr<Backend> make_nccl_backend(int, int, const UniqueId&, Device device, double) {
  throw DeviceError(fmt::format(
      "[ProcessGroup] {} was asked for, but this build of Loom has no CUDA backend (so no "
      "NCCL); use ProcessGroupOptions::device = cpu",
      device.str()));
}

#endif

}  // namespace loom::distributed
