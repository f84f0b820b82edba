// File: tests/distributed/dead_rank_gpu_test.cc
// dead_rank_test's failures on two GPUs over NCCL: a rank that stalls or dies
// makes the other fail with a clear error within the group's timeout (3 s),
// never a hang. Needs two GPUs and Open MPI's launcher; the job's programs are
// found at LOOM_MPIRUN_SH and LOOM_DEAD_RANK_WORKER (the GPU bundle's
// run_multi_gpu.sh sets them), else at their places in the source tree.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "core/device.h"
#include "tests/distributed/job.h"

namespace {

std::string from_env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

loom::testing::JobResult run_gpu_job(const std::string& scenario) {
  return loom::testing::run_job(from_env("LOOM_MPIRUN_SH", "tests/distributed/mpirun.sh") + " 2 " +
                                from_env("LOOM_DEAD_RANK_WORKER", "tests/distributed/dead_rank_worker") +
                                " " + scenario + " gpu");
}

bool fewer_than_two_gpus() { return loom::cuda_device_count() < 2; }

}  // namespace

TEST_CASE("two GPUs: a stalled rank makes the other throw DistError after the timeout" *
          doctest::skip(fewer_than_two_gpus())) {
  loom::testing::JobResult job = run_gpu_job("stall");
  CHECK(job.exit_code != 0);
  CHECK(job.seconds < 60);  // timeout 3 s, NCCL set-up included; the stalled rank sleeps 60 s
  CHECK(job.output.find("rank 0 caught: [all_reduce] rank 0 of 2 waited 3 s") != std::string::npos);
  CHECK(job.output.find("finished without noticing") == std::string::npos);
}

TEST_CASE("two GPUs: a rank stalled in DDP's step makes the other throw at its next forward" *
          doctest::skip(fewer_than_two_gpus())) {
  loom::testing::JobResult job = run_gpu_job("ddp-stall");
  CHECK(job.exit_code != 0);
  CHECK(job.seconds < 60);
  CHECK(job.output.find("rank 0 caught: [all_reduce] rank 0 of 2 waited 3 s") != std::string::npos);
}

TEST_CASE("two GPUs: a rank that exits early ends the job with an error" *
          doctest::skip(fewer_than_two_gpus())) {
  loom::testing::JobResult job = run_gpu_job("exit");
  CHECK(job.exit_code != 0);
  CHECK(job.seconds < 60);
  const bool ours = job.output.find("rank 0 caught: [all_reduce]") != std::string::npos;
  const bool mpiruns = job.output.find("due to process rank 1") != std::string::npos;
  CHECK((ours || mpiruns));
  CHECK(job.output.find("finished without noticing") == std::string::npos);
}
