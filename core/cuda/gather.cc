// File: core/cuda/gather.cc
// Checked launches of the batch gathers (gather.cu) on the current stream.
#include "core/cuda/gather.h"

#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void gather_images(const Strided& out, const Strided& images, const Strided& indices,
                   const Strided& placements, const ImageGatherParams& params) {
  LOOM_CUDA_CHECK(launch_gather_images(out, images, indices, placements, params, current_stream()));
}

void gather_labels(const Strided& out, const Strided& labels, const Strided& indices) {
  LOOM_CUDA_CHECK(launch_gather_labels(out, labels, indices, current_stream()));
}

}  // namespace loom::cuda
