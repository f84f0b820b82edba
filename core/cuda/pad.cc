// File: core/cuda/pad.cc
// Checked launches of the pad kernels on the current stream.
#include "core/cuda/pad.h"

#include "core/cuda/pad_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void pad(const Strided& out, const Strided& in, const kernel::PadSpec& spec) {
  check_kernel_rank(out, "pad");
  LOOM_CUDA_CHECK(launch_pad(out, in, spec, current_stream()));
}

void pad_backward(const Strided& dx, const Strided& dy, const kernel::PadSpec& spec) {
  check_kernel_rank(dy, "pad_backward");
  LOOM_CUDA_CHECK(launch_pad_backward(dx, dy, spec, current_stream()));
}

}  // namespace loom::cuda
