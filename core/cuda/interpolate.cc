// File: core/cuda/interpolate.cc
// Checked launches of the resampling kernels on the current stream.
#include "core/cuda/interpolate.h"

#include "core/cuda/interpolate_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void interpolate(const Strided& y, const Strided& x, const kernel::InterpolateSpec& spec) {
  LOOM_CUDA_CHECK(launch_interpolate(y, x, spec, current_stream()));
}

void interpolate_backward(const Strided& dx, const Strided& dy, const kernel::InterpolateSpec& spec) {
  LOOM_CUDA_CHECK(launch_interpolate_backward(dx, dy, spec, current_stream()));
}

}  // namespace loom::cuda
