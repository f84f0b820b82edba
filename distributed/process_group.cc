// File: distributed/process_group.cc
// The transport-independent half of ProcessGroup: argument checks, the
// metadata exchange that turns a rank mismatch into a clear error, staging of
// non-contiguous tensors, and the deadline loop every wait goes through.
#include "distributed/process_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/autograd.h"
#include "core/error.h"
#include "distributed/backend.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#endif

namespace loom::distributed {

namespace {

constexpr int64_t kMaxMetaDims = 8;

enum class OpCode : int64_t { AllReduce, Broadcast, AllGather, ReduceScatter };

OpCode op_code(std::string_view op) {
  if (op == "all_reduce") return OpCode::AllReduce;
  if (op == "broadcast") return OpCode::Broadcast;
  if (op == "all_gather") return OpCode::AllGather;
  return OpCode::ReduceScatter;
}

std::string_view op_name(int64_t code) {
  switch (static_cast<OpCode>(code)) {
    case OpCode::AllReduce: return "all_reduce";
    case OpCode::Broadcast: return "broadcast";
    case OpCode::AllGather: return "all_gather";
    case OpCode::ReduceScatter: return "reduce_scatter";
  }
  return "an unknown collective";
}

// [op, dtype, root, ndim, size 0 .. size 7]; dims past 8 are folded into the last.
std::vector<int64_t> meta_row(std::string_view op, const Tensor& t, int root) {
  std::vector<int64_t> row = {static_cast<int64_t>(op_code(op)), static_cast<int64_t>(t.dtype()),
                              root, t.dim()};
  for (int64_t d = 0; d < kMaxMetaDims; ++d) {
    int64_t size = d < t.dim() ? t.size(d) : -1;
    if (d == kMaxMetaDims - 1) {
      for (int64_t rest = d + 1; rest < t.dim(); ++rest) size *= t.size(rest);
    }
    row.push_back(size);
  }
  return row;
}

std::string describe_row(const std::vector<int64_t>& row) {
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < std::min(row[3], kMaxMetaDims); ++d) sizes.push_back(row[4 + d]);
  return fmt::format("{} {}", dtype_name(static_cast<DType>(row[1])), shape_str(sizes));
}

// Bytes a collective may read and write directly: dense, row-major.
bool dense(const Tensor& t) { return t.is_contiguous(); }

void check_floating_reduce(const Tensor& t, ReduceOp reduce, std::string_view op) {
  LOOM_CHECK(t.dtype() != DType::Bool, TypeError,
             "[{}] cannot sum bool tensors; convert to int32 or float32 first", op);
  LOOM_CHECK(reduce != ReduceOp::Avg || is_floating(t.dtype()), TypeError,
             "[{}] ReduceOp::Avg needs a floating tensor, got {}; use Sum and divide, or convert",
             op, dtype_name(t.dtype()));
}

bool capturing(const Tensor& t) {
#ifdef LOOM_WITH_CUDA
  return t.device().is_cuda() && cuda::is_capturing();
#else
  return false;
#endif
}

}  // namespace

void poll_until(const std::function<bool()>& done, double timeout_seconds,
                const std::function<std::string()>& timeout_message) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_seconds);
  auto pause = std::chrono::microseconds(0);
  while (!done()) {
    if (Clock::now() > deadline) throw DistError(timeout_message());
    if (pause.count() == 0) {
      std::this_thread::yield();
      if (Clock::now() - start > std::chrono::microseconds(200)) pause = std::chrono::microseconds(20);
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
}

std::string peer_timeout_message(std::string_view op, int rank, int size, double seconds,
                                 std::string_view transport) {
  return fmt::format(
      "[{}] rank {} of {} waited {:g} s for the other ranks ({}); a rank has probably died or "
      "stalled (look at its output), or the ranks do not run the same collectives in the same "
      "order. This process group is no longer usable: end the job. Raise "
      "ProcessGroupOptions::timeout_seconds if a rank is just slow",
      op, rank, size, seconds, transport);
}

std::string UniqueId::hex() const {
  std::string out;
  for (char c : bytes) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

UniqueId UniqueId::from_hex(std::string_view hex) {
  UniqueId id;
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw ValueError(fmt::format("[UniqueId::from_hex] '{}' is not a hex digit; pass what "
                                 "UniqueId::hex() printed on rank 0",
                                 c));
  };
  LOOM_CHECK(hex.size() == 2 * id.bytes.size(), ValueError,
             "[UniqueId::from_hex] expected {} hex digits (an NCCL unique id), got {}",
             2 * id.bytes.size(), hex.size());
  for (size_t i = 0; i < id.bytes.size(); ++i) {
    id.bytes[i] = static_cast<char>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  }
  return id;
}

ProcessGroup::ProcessGroup(int rank, int size, Device device, ProcessGroupOptions options)
    : rank_(rank), size_(size), device_(device), options_(options) {}

ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::from_mpi(ProcessGroupOptions options) {
  LOOM_CHECK(options.timeout_seconds > 0, ValueError,
             "[ProcessGroup] timeout_seconds must be positive, got {}", options.timeout_seconds);
  MpiBootstrap mpi = mpi_bootstrap();
  Device device = Device::cpu();
  if (options.device) {
    device = *options.device;
  } else if (cuda_available()) {
    device = Device::cuda(mpi.local_rank % cuda_device_count());
  }
  std::shared_ptr<ProcessGroup> group(new ProcessGroup(mpi.rank, mpi.size, device, options));
  group->mpi_ = make_mpi_backend(options.timeout_seconds);
  if (device.is_cuda()) {
    UniqueId id = mpi.rank == 0 ? UniqueId::create() : UniqueId{};
    id = broadcast_unique_id(id, options.timeout_seconds);
    group->nccl_ = make_nccl_backend(mpi.rank, mpi.size, id, device, options.timeout_seconds);
#ifdef LOOM_WITH_CUDA
    // One process drives one GPU: what it allocates without naming a device goes there.
    LOOM_CUDA_CHECK(cudaSetDevice(device.index));
#endif
  }
  return group;
}

std::shared_ptr<ProcessGroup> ProcessGroup::from_unique_id(int rank, int size, const UniqueId& id,
                                                           ProcessGroupOptions options) {
  LOOM_CHECK(size >= 1 && rank >= 0 && rank < size, ValueError,
             "[ProcessGroup] rank {} is not in [0, size {}); ranks count from 0", rank, size);
  LOOM_CHECK(options.timeout_seconds > 0, ValueError,
             "[ProcessGroup] timeout_seconds must be positive, got {}", options.timeout_seconds);
  Device device = options.device.value_or(current_cuda_device());
  LOOM_CHECK(device.is_cuda(), DeviceError,
             "[ProcessGroup] from_unique_id makes an NCCL group, which needs a CUDA device, got "
             "{}; CPU tensors go over MPI: use from_mpi under mpirun",
             device.str());
  std::shared_ptr<ProcessGroup> group(new ProcessGroup(rank, size, device, options));
  group->nccl_ = make_nccl_backend(rank, size, id, device, options.timeout_seconds);
  return group;
}

bool ProcessGroup::has_mpi() const { return mpi_ != nullptr; }
bool ProcessGroup::has_nccl() const { return nccl_ != nullptr; }

Backend& ProcessGroup::backend_for(const Tensor& tensor, std::string_view op) const {
  LOOM_CHECK(tensor.defined(), ValueError, "[{}] the tensor is undefined", op);
  if (tensor.device().is_cpu()) {
    LOOM_CHECK(mpi_ != nullptr, DeviceError,
               "[{}] CPU tensors go over MPI, and this group was made from a unique id without "
               "MPI; move the tensor to {} or make the group with ProcessGroup::from_mpi",
               op, device_.str());
    return *mpi_;
  }
  LOOM_CHECK(nccl_ != nullptr, DeviceError,
             "[{}] the tensor is on {} but this group has no NCCL communicator (it was made for "
             "CPU tensors; pass ProcessGroupOptions::device = cuda:k to from_mpi)",
             op, tensor.device().str());
  LOOM_CHECK(tensor.device() == device_, DeviceError,
             "[{}] the tensor is on {} but this rank's communicator drives {}; one process "
             "drives one GPU, move the tensor there",
             op, tensor.device().str(), device_.str());
  return *nccl_;
}

void ProcessGroup::check_same_everywhere(std::string_view op, const Tensor& tensor,
                                         int root) const {
  if (size_ == 1 || capturing(tensor)) return;
  Backend& channel = mpi_ ? *mpi_ : *nccl_;
  const std::vector<int64_t> mine = meta_row(op, tensor, root);
  const std::vector<std::vector<int64_t>> rows = channel.gather_rows(mine, op);
  for (int r = 0; r < size_; ++r) {
    const std::vector<int64_t>& row = rows[r];
    if (row == mine) continue;
    if (row[0] != mine[0]) {
      throw DistError(fmt::format(
          "[{}] rank {} called {} while rank {} called {}; every rank must run the same "
          "collectives in the same order",
          op, rank_, op, r, op_name(row[0])));
    }
    if (row[2] != mine[2]) {
      throw ValueError(fmt::format("[{}] rank {} passed root {} but rank {} passed root {}; "
                                   "every rank must name the same root",
                                   op, rank_, mine[2], r, row[2]));
    }
    std::string both = fmt::format("rank {} has {}, rank {} has {}", rank_, describe_row(mine), r,
                                   describe_row(row));
    if (row[1] != mine[1]) {
      throw TypeError(fmt::format(
          "[{}] the ranks' dtypes differ: {}; every rank must pass the same dtype", op, both));
    }
    throw ShapeError(fmt::format(
        "[{}] the ranks' shapes differ: {}; every rank must pass the same shape", op, both));
  }
}

void ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  Backend& backend = backend_for(tensor, "all_reduce");
  check_floating_reduce(tensor, op, "all_reduce");
  check_same_everywhere("all_reduce", tensor, 0);
  Tensor buffer = dense(tensor) ? tensor : tensor.contiguous();
  backend.all_reduce(buffer, op, "all_reduce")->wait();
  NoGradGuard no_grad;
  if (!buffer.is_same(tensor)) tensor.detach().copy_(buffer);
}

void ProcessGroup::broadcast(const Tensor& tensor, int root) {
  Backend& backend = backend_for(tensor, "broadcast");
  LOOM_CHECK(root >= 0 && root < size_, ValueError,
             "[broadcast] root {} is not a rank of this group of {}", root, size_);
  check_same_everywhere("broadcast", tensor, root);
  Tensor buffer = dense(tensor) ? tensor : tensor.contiguous();
  backend.broadcast(buffer, root)->wait();
  NoGradGuard no_grad;
  if (!buffer.is_same(tensor)) tensor.detach().copy_(buffer);
}

void ProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  Backend& backend = backend_for(input, "all_gather");
  backend_for(output, "all_gather");
  LOOM_CHECK(output.dtype() == input.dtype(), TypeError,
             "[all_gather] output is {} but input is {}; they must match",
             dtype_name(output.dtype()), dtype_name(input.dtype()));
  Shape expected = input.sizes();
  LOOM_CHECK(!expected.empty(), ShapeError,
             "[all_gather] the input is 0-d; gather (1,) tensors into a (size,) output");
  expected[0] *= size_;
  LOOM_CHECK(output.sizes() == expected, ShapeError,
             "[all_gather] output is {} but {} ranks with input {} need {} (ranks stacked along "
             "dim 0)",
             shape_str(output.sizes()), size_, shape_str(input.sizes()), shape_str(expected));
  check_same_everywhere("all_gather", input, 0);
  Tensor in = dense(input) ? input : input.contiguous();
  Tensor out = dense(output) ? output : output.contiguous();
  backend.all_gather(out, in)->wait();
  NoGradGuard no_grad;
  if (!out.is_same(output)) output.detach().copy_(out);
}

void ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  Backend& backend = backend_for(input, "reduce_scatter");
  backend_for(output, "reduce_scatter");
  check_floating_reduce(input, op, "reduce_scatter");
  LOOM_CHECK(output.dtype() == input.dtype(), TypeError,
             "[reduce_scatter] output is {} but input is {}; they must match",
             dtype_name(output.dtype()), dtype_name(input.dtype()));
  Shape expected = output.sizes();
  LOOM_CHECK(!expected.empty(), ShapeError,
             "[reduce_scatter] the output is 0-d; scatter a (size,) input into (1,) outputs");
  expected[0] *= size_;
  LOOM_CHECK(input.sizes() == expected, ShapeError,
             "[reduce_scatter] input is {} but {} ranks with output {} need {} (one slice of dim "
             "0 per rank)",
             shape_str(input.sizes()), size_, shape_str(output.sizes()), shape_str(expected));
  check_same_everywhere("reduce_scatter", input, 0);
  Tensor in = dense(input) ? input : input.contiguous();
  Tensor out = dense(output) ? output : output.contiguous();
  backend.reduce_scatter(out, in, op)->wait();
  NoGradGuard no_grad;
  if (!out.is_same(output)) output.detach().copy_(out);
}

void ProcessGroup::abort_job(int exit_code) const {
  if (mpi_) mpi_abort(exit_code);
  std::_Exit(exit_code);
}

void ProcessGroup::barrier() { (mpi_ ? *mpi_ : *nccl_).barrier(); }

std::unique_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  Backend& backend = backend_for(tensor, "all_reduce_async");
  check_floating_reduce(tensor, op, "all_reduce_async");
  LOOM_CHECK(dense(tensor), ValueError,
             "[all_reduce_async] the tensor (shape {}, strides {}) must be contiguous: the "
             "asynchronous all-reduce works in place on dense buffers; use all_reduce",
             shape_str(tensor.sizes()), shape_str(tensor.strides()));
  return backend.all_reduce(tensor, op, "all_reduce");
}

}  // namespace loom::distributed
