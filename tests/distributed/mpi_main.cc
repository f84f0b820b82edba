// File: tests/distributed/mpi_main.cc
// The doctest main of suites that run as several MPI ranks (mpirun.sh N suite):
// every rank runs every test case in the same order (their collectives must
// match), rank 0 prints the report, and another rank's report is printed only
// when that rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <iostream>
#include <sstream>

int main(int argc, char** argv) {
  int provided = 0, rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context context(argc, argv);
  // mpirun hands ranks a pseudo-terminal: without this the report is coloured
  // and tools/test.sh would not find its "[doctest] test cases:" line.
  context.setOption("no-colors", true);
  std::ostringstream quiet;
  if (rank != 0) context.setCout(&quiet);
  const int failed = context.run();
  if (rank != 0 && failed != 0) std::cout << "rank " << rank << " failed:\n" << quiet.str();
  MPI_Finalize();
  return failed;
}
