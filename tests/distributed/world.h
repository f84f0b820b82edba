// File: tests/distributed/world.h
// The process group of the MPI suites: one per process, shared by the test
// cases (made on first use, a collective call, so every rank makes it in the
// same test case).
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "distributed/process_group.h"

namespace loom::testing {

// Where the DDP cases train: the CPU (MPI) by default; LOOM_DISTRIBUTED_TEST_DEVICE=cuda
// on a multi-GPU host trains on cuda:<local rank> over NCCL (the collective
// cases keep CPU tensors, so they still test MPI).
inline bool test_on_gpu() {
  const char* device = std::getenv("LOOM_DISTRIBUTED_TEST_DEVICE");
  return device != nullptr && std::string(device) == "cuda";
}

// Whether the suite runs as a single rank (mpirun -np 1, or no launcher), read from
// the launcher's environment (Open MPI's, else MPICH's) because doctest decides its
// skips before main starts MPI. A case about ranks that disagree needs two.
inline bool single_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* size = std::getenv(name)) return std::atoi(size) < 2;
  }
  return true;
}

inline const std::shared_ptr<distributed::ProcessGroup>& world() {
  // A short timeout, so a broken test fails in seconds instead of hanging the suite.
  static std::shared_ptr<distributed::ProcessGroup> group = distributed::ProcessGroup::from_mpi(
      {.timeout_seconds = 60,
       .device = test_on_gpu() ? std::nullopt : std::optional<Device>(Device::cpu())});
  return group;
}

}  // namespace loom::testing
