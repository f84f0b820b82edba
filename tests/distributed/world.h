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

inline const std::shared_ptr<distributed::ProcessGroup>& world() {
  // A short timeout, so a broken test fails in seconds instead of hanging the suite.
  static std::shared_ptr<distributed::ProcessGroup> group = distributed::ProcessGroup::from_mpi(
      {.timeout_seconds = 60,
       .device = test_on_gpu() ? std::nullopt : std::optional<Device>(Device::cpu())});
  return group;
}

}  // namespace loom::testing
