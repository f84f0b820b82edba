// File: distributed/backend.h
// What the two transports of a ProcessGroup implement (private to distributed/):
// MPI for CPU tensors and NCCL for CUDA tensors. Arguments are validated by
// ProcessGroup (contiguous, same dtype and device, sizes that fit); backends
// only move bytes, and every wait polls against the deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group.h"

namespace loom::distributed {

class Backend {
 public:
  virtual ~Backend() = default;
  // Each call enqueues (NCCL) or starts (MPI) the collective; wait() on the
  // result finishes it. `op` names the public call in error messages.
  virtual std::unique_ptr<Work> all_reduce(const Tensor& t, ReduceOp reduce, std::string_view op) = 0;
  virtual std::unique_ptr<Work> broadcast(const Tensor& t, int root) = 0;
  virtual std::unique_ptr<Work> all_gather(const Tensor& output, const Tensor& input) = 0;
  virtual std::unique_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                               ReduceOp reduce) = 0;
  virtual void barrier() = 0;
  // Every rank's `row` (all rows the same length), rank by rank: the metadata
  // exchange before a checked collective.
  virtual std::vector<std::vector<int64_t>> gather_rows(const std::vector<int64_t>& row,
                                                        std::string_view op) = 0;
};

// Calls `done` until it returns true; throws DistError from `timeout_message`
// once `timeout_seconds` have passed. Backs off from spinning to 1 ms sleeps,
// so a long wait does not burn a core the data loader could use.
void poll_until(const std::function<bool()>& done, double timeout_seconds,
                const std::function<std::string()>& timeout_message);

// "rank 1 of 4 waited 300 s for the other ranks in all_reduce; a rank has probably
// died or stalled (see its output) ..."
std::string peer_timeout_message(std::string_view op, int rank, int size, double seconds,
                                 std::string_view transport);

// The backends. make_mpi_backend is always built; make_nccl_backend throws
// DeviceError in a build without CUDA.
struct MpiBootstrap {
  int rank = 0, size = 1;
  int local_rank = 0;  // rank among the processes of this host
};
// Initialises MPI if needed and describes this process's place in the job.
MpiBootstrap mpi_bootstrap();
std::unique_ptr<Backend> make_mpi_backend(double timeout_seconds);
// MPI_Abort on MPI_COMM_WORLD.
[[noreturn]] void mpi_abort(int exit_code);
// Broadcasts rank 0's id over MPI (from_mpi's bootstrap of NCCL).
UniqueId broadcast_unique_id(const UniqueId& id, double timeout_seconds);
std::unique_ptr<Backend> make_nccl_backend(int rank, int size, const UniqueId& id, Device device,
                                           double timeout_seconds);

}  // namespace loom::distributed
