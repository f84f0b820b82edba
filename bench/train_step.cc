// File: bench/train_step.cc
// The Loom training-step benchmark (bench/step_bench.h; flags: --help).
#include "bench/step_bench.h"

int main(int argc, char** argv) { return loom::bench::bench_main(argc, argv); }
