// File: core/cuda/random.cc
// Checked launches of the random fills on the current stream, and where their
// Philox blocks come from (the generator now, or a captured graph's replays).
#include "core/cuda/random.h"

#include "core/cuda/graph.h"
#include "core/cuda/random_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

PhiloxArgs philox_draw(Generator& gen, uint64_t blocks) {
  if (is_capturing()) return CudaGraph::draw_in_capture(gen, blocks);
  return {.seed = gen.seed(), .first_block = gen.reserve(blocks)};
}

void dropout_apply(const Strided& out, const Strided& in, double p, const PhiloxArgs& philox) {
  check_kernel_rank(out, "dropout");
  LOOM_CHECK(in.sizes == out.sizes && in.dtype == out.dtype, ValueError,
             "[dropout] dropout_apply needs in and out of one shape and dtype, got {} {} and {} {}",
             shape_str(in.sizes), dtype_name(in.dtype), shape_str(out.sizes), dtype_name(out.dtype));
  LOOM_CUDA_CHECK(launch_dropout_apply(out, in, p, philox, current_stream()));
}

void fill_random(const Strided& out, const RandomDraw& draw, const PhiloxArgs& philox) {
  check_kernel_rank(out, "random fill");
  LOOM_CHECK(is_floating(out.dtype), TypeError,
             "[random fill] fills a floating dtype, got {}; draw in float64 and convert", dtype_name(out.dtype));
  LOOM_CHECK(draw.kind != RandomDraw::Kind::Uniform || draw.bits == 53 || (draw.bits >= 1 && draw.bits <= 24),
             ValueError, "[random fill] a uniform draw keeps 1 to 24 bits, or 53, got {}", draw.bits);
  LOOM_CHECK(draw.kind != RandomDraw::Kind::Integer || draw.range > 0, ValueError,
             "[random fill] an integer draw needs a range of at least 1");
  LOOM_CUDA_CHECK(launch_fill_random(out, draw, philox, current_stream()));
}

}  // namespace loom::cuda
