// File: distributed/process_group.h
// Collectives between the processes of a data-parallel job: NCCL for CUDA
// tensors, MPI for CPU tensors. Nothing here is a transport of Loom's own:
// mpirun starts the ranks and MPI bootstraps NCCL (rank 0's ncclUniqueId is
// broadcast over MPI); other launchers pass rank, size and the id themselves.
//
//   // mpirun -np 4 ./train       (one rank per GPU: rank r of a host drives cuda:<local rank>)
//   auto group = loom::distributed::ProcessGroup::from_mpi();
//   Tensor g = ...;                                  // same shape and dtype on every rank
//   group->all_reduce(g, loom::distributed::ReduceOp::Avg); // in place, every rank gets the mean
//
// Every blocking collective first exchanges a small metadata row (op, dtype,
// shape, root) so that ranks that disagree get a ShapeError or TypeError
// naming each rank's tensor instead of a hang or garbage. Every wait polls
// against a deadline (options.timeout_seconds): a peer that died or stalled
// makes the others throw DistError instead of hanging. After a timeout the
// group is unusable (its NCCL communicator is aborted): end the process.
//
// CUDA collectives run on the calling thread's current stream
// (core/cuda/stream.h). While that stream captures a CUDA graph they are
// recorded, not waited for, and the metadata check is skipped (it ran during
// the eager warm-up steps).
#pragma once

#include <array>
#include <optional>
#include <memory>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/tensor.h"

namespace loom::distributed {

enum class ReduceOp { Sum, Avg };

struct ProcessGroupOptions {
  // How long one collective (or the setup) waits for the other ranks before it
  // throws DistError. Long enough for a slow rank's first cuDNN plan builds.
  double timeout_seconds = 300;
  // The GPU whose tensors go over NCCL. from_mpi's default: cuda:<local rank
  // modulo the GPUs of the host> where a GPU is usable, else none (CPU only).
  // Device::cpu() asks for an MPI-only group on a GPU host.
  std::optional<Device> device;
};

// NCCL's 128-byte communicator id: rank 0 creates it, every rank passes the
// same bytes to from_unique_id (over any channel: a file, an env var as hex).
struct UniqueId {
  std::array<char, 128> bytes{};
  static UniqueId create();  // DeviceError where this build has no NCCL
  std::string hex() const;
  static UniqueId from_hex(std::string_view hex);  // ValueError unless 256 hex digits
};

// An operation in flight (DistributedDataParallel's bucket all-reduces).
class Work {
 public:
  virtual ~Work() = default;
  // Returns when the operation has finished on this rank (a CUDA one: its
  // stream work has run), polling against the group's deadline; DistError on
  // timeout or a failed peer. Under CUDA-graph capture it returns at once.
  virtual void wait() = 0;
};

class Backend;

class ProcessGroup {
 public:
  // The ranks of the MPI job this process belongs to (MPI_Init is called when
  // nobody has yet, and MPI_Finalize at exit). A CPU-only group where no GPU
  // is usable; with a GPU also an NCCL communicator on options.device, which
  // becomes the calling thread's current GPU.
  static std::shared_ptr<ProcessGroup> from_mpi(ProcessGroupOptions options = {});
  // An NCCL-only group (no MPI: CUDA tensors only) for launchers other than
  // mpirun: `size` processes, this one `rank`, all with the same `id`.
  static std::shared_ptr<ProcessGroup> from_unique_id(int rank, int size, const UniqueId& id,
                                                      ProcessGroupOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Where CUDA collectives run: cuda:k, or cpu for an MPI-only group.
  Device device() const { return device_; }
  bool has_mpi() const;
  bool has_nccl() const;
  double timeout_seconds() const { return options_.timeout_seconds; }

  // --- blocking collectives (in place; tensors of any strides) -------------------
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // Every rank's tensor gets root's values.
  void broadcast(const Tensor& tensor, int root = 0);
  // output (size * d0, d1, ...) gets rank r's input (d0, d1, ...) at rows [r*d0, (r+1)*d0).
  void all_gather(const Tensor& output, const Tensor& input);
  // input (size * d0, d1, ...) is reduced over the ranks; rank r keeps rows
  // [r*d0, (r+1)*d0) in output (d0, d1, ...).
  void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  // Returns once every rank has called it (over MPI where there is MPI).
  void barrier();

  // Ends every rank of the job now, with `exit_code` (MPI_Abort; a group
  // without MPI ends this process only, its peers then time out). For a rank
  // that failed: the others would otherwise wait out their timeout.
  [[noreturn]] void abort_job(int exit_code) const;

  // --- asynchronous, unchecked ---------------------------------------------------
  // All-reduce of a contiguous tensor without the metadata exchange, for
  // callers that checked the layout once (DistributedDataParallel's buckets).
  // CUDA: enqueued on the current stream.
  std::unique_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op);

 private:
  ProcessGroup(int rank, int size, Device device, ProcessGroupOptions options);
  Backend& backend_for(const Tensor& tensor, std::string_view op) const;
  // Throws ShapeError / TypeError / DistError when the ranks disagree on op,
  // dtype, shape or root.
  void check_same_everywhere(std::string_view op, const Tensor& tensor, int root) const;

  int rank_ = 0, size_ = 1;
  Device device_;
  ProcessGroupOptions options_;
  std::unique_ptr<Backend> mpi_;   // CPU tensors and the metadata checks
  std::unique_ptr<Backend> nccl_;  // CUDA tensors on device_
};

}  // namespace loom::distributed
