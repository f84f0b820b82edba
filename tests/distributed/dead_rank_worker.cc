// File: tests/distributed/dead_rank_worker.cc
// A two-rank job in which rank 1 fails, for dead_rank_test.cc and
// dead_rank_gpu_test.cc:
//   mpirun.sh 2 dead_rank_worker stall|exit|ddp-stall [gpu]
// stall:     rank 1 never joins the all-reduce (a hung process).
// exit:      rank 1 exits without a word before the all-reduce (a crash).
// ddp-stall: rank 1 stops after its forward; rank 0 waits in backward.
// gpu:       each rank on its GPU (cuda:<local rank>), collectives over NCCL;
//            else the CPU over MPI.
// Rank 0 prints "rank 0 caught: <message>" for a loom::Error and aborts the
// job with exit code 3, as a trainer should.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/ops/ops.h"
#include "distributed/ddp.h"
#include "distributed/process_group.h"
#include "layers/nn.h"

using namespace loom;

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  const bool gpu = argc > 2 && std::string(argv[2]) == "gpu";
  auto group = distributed::ProcessGroup::from_mpi(
      {.timeout_seconds = 3, .device = gpu ? std::nullopt : std::optional(Device::cpu())});
  const Device device = group->device();
  try {
    Tensor x = ones({16}, {.device = device});
    group->all_reduce(x);  // everyone alive: this one completes
    if (scenario == "ddp-stall") {
      manual_seed(0);
      auto net = std::make_shared<nn::Sequential>(nn::Linear(4, 3));
      net->to(device);
      nn::DistributedDataParallel ddp(net, group);
      Tensor loss = sum(ddp(ones({2, 4}, {.device = device})));
      if (group->rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
      loss.backward();  // on the CPU this waits for the all-reduce: it throws here
      (void)ddp(ones({2, 4}, {.device = device}));  // on a GPU the next forward waits for it
    } else {
      if (group->rank() == 1 && scenario == "stall") std::this_thread::sleep_for(std::chrono::seconds(60));
      if (group->rank() == 1 && scenario == "exit") std::_Exit(0);
      group->all_reduce(x);
    }
    std::printf("rank %d finished without noticing the failure\n", group->rank());
  } catch (const Error& e) {
    std::printf("rank %d caught: %s\n", group->rank(), e.what());
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  return 0;
}
