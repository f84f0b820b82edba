// File: tests/distributed/distributed_trainer_test.cc
// The trainers' --distributed mode (training/distributed.h) as ranks
// of the MPI suite: it lives here, not under tests/examples, because it needs
// mpirun.sh's ranks.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "training/trainer.h"
#include "tests/distributed/world.h"
#include "tests/testing.h"

using namespace loom;
using loom::testing::world;

namespace {

// The same path on every rank (mpirun gives local ranks the same environment).
std::string shared_path(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return (std::filesystem::path(dir ? dir : "/tmp") / name).string();
}

training::TrainConfig synthetic_run(int epochs) {
  return {.synthetic_images = 240, .epochs = epochs, .batch_size = 16, .device = Device::cpu(),
          .seed = 3, .save = shared_path("ddp.ckpt"), .metrics = shared_path("ddp.csv"),
          .progress = false, .distributed = true};
}

int count_lines(const std::string& path) {
  std::ifstream in(path);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

}  // namespace

TEST_CASE("trainer --distributed: the replicas stay identical, rank 0 alone writes, resume works") {
  if (world()->rank() == 0) {
    std::filesystem::remove(shared_path("ddp.csv"));
    std::filesystem::remove(shared_path("ddp.ckpt"));
  }
  world()->barrier();
  training::TrainResult first = training::train(synthetic_run(1));
  REQUIRE(first.epochs.size() == 1);
  // Every rank saw a different shard, yet the averaged gradients keep the
  // parameters bit-identical: compare each with rank 0's. (Batch-norm running
  // statistics are each rank's own: DistributedDataParallelOptions::broadcast_buffers.)
  for (auto& [name, t] : first.model) {
    CAPTURE(name);
    if (name.find("running_") != std::string::npos) continue;
    Tensor rank0 = t.clone();
    world()->broadcast(rank0, 0);
    CHECK_CLOSE(t, rank0, 0, 0);
  }
  world()->barrier();
  CHECK(count_lines(shared_path("ddp.csv")) == 2);  // the header and epoch 1, from rank 0 only
  // Resuming continues from the checkpoint rank 0 wrote (any number of ranks may resume it).
  training::TrainConfig more = synthetic_run(2);
  more.resume = shared_path("ddp.ckpt");
  training::TrainResult second = training::train(more);
  REQUIRE(second.epochs.size() == 1);
  CHECK(second.epochs[0].epoch == 2);
  world()->barrier();
  CHECK(count_lines(shared_path("ddp.csv")) == 3);
}

// On GPUs (LOOM_DISTRIBUTED_TEST_DEVICE=cuda): rank 0 trains alone on its GPU, the
// job resumes that checkpoint with every rank on its own GPU, and rank 0
// alone resumes the job's checkpoint in turn.
TEST_CASE("trainer --distributed on GPUs resumes a 1-GPU checkpoint, and one GPU resumes its" *
          doctest::skip(!loom::testing::test_on_gpu())) {
  const Device mine = world()->device();
  training::TrainConfig single = synthetic_run(1);
  single.device = mine;
  single.distributed = false;
  single.metrics.clear();
  single.save = shared_path("single_gpu.ckpt");
  if (world()->rank() == 0) {
    training::TrainResult alone = training::train(single);
    REQUIRE(alone.epochs.size() == 1);
  }
  world()->barrier();
  training::TrainConfig job = synthetic_run(2);
  job.device = mine;
  job.metrics.clear();
  job.resume = shared_path("single_gpu.ckpt");
  job.save = shared_path("two_gpu.ckpt");
  training::TrainResult together = training::train(job);
  REQUIRE(together.epochs.size() == 1);
  CHECK(together.epochs[0].epoch == 2);
  for (auto& [name, t] : together.model) {
    CAPTURE(name);
    CHECK(t.device() == mine);
    if (name.find("running_") != std::string::npos) continue;
    Tensor rank0 = t.clone();
    world()->broadcast(rank0, 0);
    CHECK_CLOSE(t, rank0, 0, 0);
  }
  world()->barrier();
  if (world()->rank() == 0) {
    training::TrainConfig again = single;
    again.epochs = 3;
    again.resume = shared_path("two_gpu.ckpt");
    again.save.clear();
    training::TrainResult resumed = training::train(again);
    REQUIRE(resumed.epochs.size() == 1);
    CHECK(resumed.epochs[0].epoch == 3);
  }
  world()->barrier();
}
