// File: core/cuda/random.cc
// Checked launches of the random fills on the current stream.
#include "core/cuda/random.h"

#include "core/cuda/random_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

// The generator's offset advances on the host: a captured graph would replay
// the same random numbers every time, so random draws refuse to be captured
// (optim::TrainStep then runs the step eagerly and says why).
void refuse_capture(const char* op) {
  LOOM_CHECK(!is_capturing(), CudaError,
             "[{}] random numbers cannot be drawn inside a CUDA-graph capture: the generator "
             "advances on the host, so every replay would reuse the same draws; run this step "
             "eagerly",
             op);
}

}  // namespace

void dropout_mask(const Strided& mask, double p, uint64_t seed, uint64_t first_block) {
  refuse_capture("dropout");
  check_kernel_rank(mask, "dropout");
  LOOM_CUDA_CHECK(launch_dropout_mask(mask, p, seed, first_block, current_stream()));
}

void fill_uniform(const Strided& out, uint64_t seed, uint64_t first_block) {
  refuse_capture("rand");
  check_kernel_rank(out, "rand");
  LOOM_CUDA_CHECK(launch_fill_uniform(out, seed, first_block, current_stream()));
}

void fill_normal(const Strided& out, uint64_t seed, uint64_t first_block) {
  refuse_capture("randn");
  check_kernel_rank(out, "randn");
  LOOM_CUDA_CHECK(launch_fill_normal(out, seed, first_block, current_stream()));
}

}  // namespace loom::cuda
