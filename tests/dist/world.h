// The process group of the MPI suites: one per process, shared by the test
// cases (made on first use, a collective call, so every rank makes it in the
// same test case).
#pragma once

#include <memory>

#include "dist/process_group.h"

namespace loom::testing {

inline const std::shared_ptr<dist::ProcessGroup>& world() {
  // CPU tensors over MPI even on a GPU host; a short timeout, so a broken test
  // fails in seconds instead of hanging the suite.
  static std::shared_ptr<dist::ProcessGroup> group =
      dist::ProcessGroup::from_mpi({.timeout_seconds = 60, .device = Device::cpu()});
  return group;
}

}  // namespace loom::testing
