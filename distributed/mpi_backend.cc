// File: distributed/mpi_backend.cc
// CPU collectives over MPI. Every collective is a non-blocking MPI call whose
// request is polled with MPI_Test against the deadline: a blocking MPI call
// would hang forever on a rank that stalled, while this throws DistError.
// Errors are returned (MPI_ERRORS_RETURN), not fatal, and every call goes
// through LOOM_MPI_CHECK.
#include <mpi.h>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "distributed/backend.h"

namespace loom::distributed {

namespace {

void check_mpi(int status, const char* statement, const char* file, int line) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw DistError(fmt::format("[mpi] {} failed at {}:{}: {}", statement, file, line,
                              std::string(text, length)));
}

#define LOOM_MPI_CHECK(statement) check_mpi((statement), #statement, __FILE__, __LINE__)

// MPI_Finalize at exit for the process that called MPI_Init, after every
// communicator of Loom's is freed (their destructors check MPI_Finalized).
struct MpiLifetime {
  bool initialized_here = false;
  ~MpiLifetime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (initialized_here && !finalized) MPI_Finalize();
  }
};

MpiLifetime& mpi_lifetime() {
  static MpiLifetime lifetime;
  return lifetime;
}

void ensure_initialized() {
  int initialized = 0;
  LOOM_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) return;
  MpiLifetime& lifetime = mpi_lifetime();  // constructed first, so destroyed last
  int provided = 0;
  // Only the thread that runs backward calls MPI; data-loader threads never do.
  LOOM_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  lifetime.initialized_here = true;
}

MPI_Datatype mpi_type(DType dtype, std::string_view op) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::UInt8: return MPI_UINT8_T;
    case DType::Bool: return MPI_UINT8_T;
    case DType::Float16:
    case DType::BFloat16: break;
  }
  throw TypeError(fmt::format(
      "[{}] MPI has no {} type for CPU tensors; convert to float32 for the collective (GPU "
      "tensors go over NCCL, which has it)",
      op, dtype_name(dtype)));
}

// Divides by the number of ranks after a sum: MPI has no average.
void scale(const Tensor& t, double factor) {
  const int64_t n = t.numel();
  if (t.dtype() == DType::Float32) {
    float* p = t.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i] * factor);
  } else {
    double* p = t.data_ptr<double>();
    for (int64_t i = 0; i < n; ++i) p[i] *= factor;
  }
}

class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, std::string op, int rank, int size, double timeout,
          std::function<void()> finish = nullptr)
      : request_(request), op_(std::move(op)), rank_(rank), size_(size), timeout_(timeout),
        finish_(std::move(finish)) {}

  void wait() override {
    if (done_) return;
    poll_until(
        [&] {
          int flag = 0;
          LOOM_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
          return flag != 0;
        },
        timeout_, [&] { return peer_timeout_message(op_, rank_, size_, timeout_, "MPI"); });
    done_ = true;
    if (finish_) finish_();
  }

 private:
  MPI_Request request_;
  std::string op_;
  int rank_, size_;
  double timeout_;
  std::function<void()> finish_;
  bool done_ = false;
};

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(double timeout) : timeout_(timeout) {
    // A communicator of our own: user MPI traffic on MPI_COMM_WORLD cannot
    // match ours, and errors come back as codes instead of aborting.
    LOOM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    LOOM_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    LOOM_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    LOOM_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }

  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  std::unique_ptr<Work> all_reduce(const Tensor& t, ReduceOp reduce, std::string_view op) override {
    MPI_Request request;
    LOOM_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), count(t), mpi_type(t.dtype(), op),
                                  MPI_SUM, comm_, &request));
    return work(request, op, finish(t, reduce));
  }

  std::unique_ptr<Work> broadcast(const Tensor& t, int root) override {
    MPI_Request request;
    LOOM_MPI_CHECK(MPI_Ibcast(t.raw_data(), count(t), mpi_type(t.dtype(), "broadcast"), root,
                              comm_, &request));
    return work(request, "broadcast");
  }

  std::unique_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override {
    MPI_Request request;
    MPI_Datatype type = mpi_type(input.dtype(), "all_gather");
    LOOM_MPI_CHECK(MPI_Iallgather(input.raw_data(), count(input), type, output.raw_data(),
                                  count(input), type, comm_, &request));
    return work(request, "all_gather");
  }

  std::unique_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                       ReduceOp reduce) override {
    MPI_Request request;
    MPI_Datatype type = mpi_type(input.dtype(), "reduce_scatter");
    LOOM_MPI_CHECK(MPI_Ireduce_scatter_block(input.raw_data(), output.raw_data(), count(output),
                                             type, MPI_SUM, comm_, &request));
    return work(request, "reduce_scatter", finish(output, reduce));
  }

  void barrier() override {
    MPI_Request request;
    LOOM_MPI_CHECK(MPI_Ibarrier(comm_, &request));
    work(request, "barrier")->wait();
  }

  std::vector<std::vector<int64_t>> gather_rows(const std::vector<int64_t>& row,
                                                std::string_view op) override {
    const int n = static_cast<int>(row.size());
    std::vector<int64_t> all(static_cast<size_t>(n) * size_);
    MPI_Request request;
    LOOM_MPI_CHECK(MPI_Iallgather(row.data(), n, MPI_INT64_T, all.data(), n, MPI_INT64_T, comm_,
                                  &request));
    work(request, op)->wait();
    std::vector<std::vector<int64_t>> rows;
    for (int r = 0; r < size_; ++r) rows.emplace_back(all.begin() + r * n, all.begin() + (r + 1) * n);
    return rows;
  }

 private:
  int count(const Tensor& t) const {
    LOOM_CHECK(t.numel() <= std::numeric_limits<int>::max(), ValueError,
               "[mpi] {} elements exceed MPI's int count; split the tensor", t.numel());
    return static_cast<int>(t.numel());
  }

  std::function<void()> finish(const Tensor& t, ReduceOp reduce) const {
    if (reduce != ReduceOp::Avg) return nullptr;
    return [t, factor = 1.0 / size_] { scale(t, factor); };
  }

  std::unique_ptr<Work> work(MPI_Request request, std::string_view op,
                             std::function<void()> finish = nullptr) const {
    return std::make_unique<MpiWork>(request, std::string(op), rank_, size_, timeout_,
                                     std::move(finish));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_;
};

}  // namespace

MpiBootstrap mpi_bootstrap() {
  ensure_initialized();
  MpiBootstrap boot;
  LOOM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &boot.rank));
  LOOM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &boot.size));
  MPI_Comm host;
  LOOM_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, boot.rank,
                                     MPI_INFO_NULL, &host));
  LOOM_MPI_CHECK(MPI_Comm_rank(host, &boot.local_rank));
  LOOM_MPI_CHECK(MPI_Comm_free(&host));
  return boot;
}

std::unique_ptr<Backend> make_mpi_backend(double timeout_seconds) {
  return std::make_unique<MpiBackend>(timeout_seconds);
}

void mpi_abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this tells the compiler so
}

UniqueId broadcast_unique_id(const UniqueId& id, double timeout_seconds) {
  UniqueId out = id;
  int rank = 0, size = 1;
  LOOM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  LOOM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  MPI_Request request;
  LOOM_MPI_CHECK(MPI_Ibcast(out.bytes.data(), static_cast<int>(out.bytes.size()), MPI_BYTE, 0,
                            MPI_COMM_WORLD, &request));
  MpiWork(request, "ProcessGroup::from_mpi (NCCL id)", rank, size, timeout_seconds).wait();
  return out;
}

}  // namespace loom::distributed
