// File: core/cuda/random.cc
// Checked launches of the random fills on the current stream.
#include "core/cuda/random.h"

#include "core/cuda/random_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void dropout_mask(const Strided& mask, double p, uint64_t seed, uint64_t first_block) {
  check_kernel_rank(mask, "dropout");
  LOOM_CUDA_CHECK(launch_dropout_mask(mask, p, seed, first_block, current_stream()));
}

void fill_uniform(const Strided& out, uint64_t seed, uint64_t first_block) {
  check_kernel_rank(out, "rand");
  LOOM_CUDA_CHECK(launch_fill_uniform(out, seed, first_block, current_stream()));
}

void fill_normal(const Strided& out, uint64_t seed, uint64_t first_block) {
  check_kernel_rank(out, "randn");
  LOOM_CUDA_CHECK(launch_fill_normal(out, seed, first_block, current_stream()));
}

}  // namespace loom::cuda
