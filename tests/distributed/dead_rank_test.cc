// File: tests/distributed/dead_rank_test.cc
// A rank that dies or stalls makes the others fail with a clear error within
// the group's timeout (3 s in dead_rank_worker), never a hang: each case runs
// a two-rank job under mpirun and checks how and how fast it ended.
#include <doctest/doctest.h>

#include <string>

#include "tests/distributed/job.h"

namespace {

loom::testing::JobResult run_job(const std::string& scenario) {
  return loom::testing::run_job("tests/distributed/mpirun.sh 2 tests/distributed/dead_rank_worker " + scenario);
}

}  // namespace

// The stalled peer never comes back: only the deadline can end the wait.
TEST_CASE("a stalled rank makes the other throw DistError after the timeout, not hang") {
  loom::testing::JobResult job = run_job("stall");
  CHECK(job.exit_code != 0);
  CHECK(job.seconds < 30);  // timeout 3 s; the stalled rank sleeps 60 s; mpirun.sh kills at 240 s
  CHECK(job.output.find("rank 0 caught: [all_reduce] rank 0 of 2 waited 3 s for the other ranks") !=
        std::string::npos);
  CHECK(job.output.find("finished without noticing") == std::string::npos);
}

TEST_CASE("a stalled rank during DDP's backward makes the other throw DistError") {
  loom::testing::JobResult job = run_job("ddp-stall");
  CHECK(job.exit_code != 0);
  CHECK(job.seconds < 30);
  CHECK(job.output.find("rank 0 caught: [all_reduce] rank 0 of 2 waited 3 s") != std::string::npos);
}

// A crashed peer: mpirun notices the exit and ends the job, or rank 0's
// deadline fires first; either way the job fails fast and says why.
TEST_CASE("a rank that exits early ends the job with an error, not a hang") {
  loom::testing::JobResult job = run_job("exit");
  CHECK(job.exit_code != 0);
  CHECK(job.seconds < 30);
  const bool ours = job.output.find("rank 0 caught: [all_reduce]") != std::string::npos;
  const bool mpiruns = job.output.find("due to process rank 1") != std::string::npos;
  CHECK((ours || mpiruns));
  CHECK(job.output.find("finished without noticing") == std::string::npos);
}
