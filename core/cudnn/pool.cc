// File: core/cudnn/pool.cc
// Max and average pooling forward and backward through cuDNN RESAMPLE graphs.
#include "core/cudnn/pool.h"

#include "core/cudnn/plan_cache.h"
#include "core/cudnn/tensor_spec.h"

namespace loom::cudnn {

namespace {

// What runs a key cuDNN has no engine for (the op calls it when this layer returns false).
constexpr std::string_view kFallbackTier = "Loom CUDA kernels (core/cuda/pool.h)";

enum Uid : int64_t { kX = 1, kY, kIndex, kDx, kDy };

// cuDNN pads both sides explicitly; PyTorch's ceil mode may need extra cells
// past the end, so the post padding is whatever makes the output size right.
std::array<int64_t, 2> post_padding_of(const kernel::Pool2dParams& p, const Strided& x, const Strided& y) {
  return {std::max<int64_t>(0, (y.sizes[2] - 1) * p.stride_h + p.kernel_h - x.sizes[2] - p.pad_h),
          std::max<int64_t>(0, (y.sizes[3] - 1) * p.stride_w + p.kernel_w - x.sizes[3] - p.pad_w)};
}

// PyTorch's include-pad divisor clips windows to the padded input; cuDNN would
// also count the extra ceil-mode cells, so those configurations go elsewhere.
bool semantics_match(const kernel::Pool2dParams& p, std::array<int64_t, 2> post_padding) {
  if (p.max || !p.count_include_pad) return true;
  return post_padding[0] <= p.pad_h && post_padding[1] <= p.pad_w;
}

// cuDNN 9.19 on an H100 returned non-finite values for NHWC bfloat16 average
// pooling (2x2, stride 2, no padding, in bf16_gpu_test), while every max pooling
// matched exactly: 16-bit average pooling goes to the Loom kernels.
bool engine_trusted(const kernel::Pool2dParams& p, const Strided& x) {
  const bool half = x.dtype == DType::BFloat16 || x.dtype == DType::Float16;
  return p.max || !half;
}

bool cudnn_may_pool(const kernel::Pool2dParams& p, std::array<int64_t, 2> post_padding, const Strided& x) {
  return semantics_match(p, post_padding) && engine_trusted(p, x);
}

TensorSpec index_spec(const Strided& index) {
  TensorSpec spec = spec_of(index, kIndex);
  spec.dtype = CUDNN_DATA_INT8;
  return spec;
}

}  // namespace

bool pool_uses_index(const Strided& x) {
  return x.sizes.size() == 4 && x.sizes[1] > 1 && has_layout(x.sizes, x.strides, MemoryFormat::ChannelsLast) &&
         !has_layout(x.sizes, x.strides, MemoryFormat::Contiguous);
}

Graph pool2d_forward_graph(const Strided& y, const Strided* index, const Strided& x,
                          const kernel::Pool2dParams& p) {
  Graph graph;
  graph.add_tensor(spec_of(x, kX));
  graph.add_tensor(spec_of(y, kY));
  if (index) graph.add_tensor(index_spec(*index));
  graph.resample_forward(p, post_padding_of(p, x, y), kX, kY, index ? std::optional<int64_t>(kIndex) : std::nullopt);
  return graph;
}

VariantPointers pool2d_forward_pointers(const Strided& y, const Strided* index, const Strided& x) {
  VariantPointers pointers{{kX, x.data}, {kY, y.data}};
  if (index) pointers.push_back({kIndex, index->data});
  return pointers;
}

bool pool2d_forward(const Strided& y, const Strided* index, const Strided& x, const kernel::Pool2dParams& p) {
  if (!cudnn_may_pool(p, post_padding_of(p, x, y), x)) return false;
  const Graph graph = pool2d_forward_graph(y, index, x, p);
  return run_plan(graph, pool2d_forward_pointers(y, index, x), kFallbackTier);
}

Graph pool2d_backward_graph(const Strided& dx, const Strided& dy, const PoolBackwardInputs& saved,
                           const kernel::Pool2dParams& p) {
  Graph graph;
  graph.add_tensor(spec_of(dx, kDx));
  graph.add_tensor(spec_of(dy, kDy));
  Graph::ResampleBackward uids{.dy = kDy, .dx = kDx};
  if (saved.x) graph.add_tensor(spec_of(*saved.x, kX)), uids.x = kX;
  if (saved.y) graph.add_tensor(spec_of(*saved.y, kY)), uids.y = kY;
  if (saved.index) graph.add_tensor(index_spec(*saved.index)), uids.index = kIndex;
  graph.resample_backward(p, post_padding_of(p, dx, dy), uids);
  return graph;
}

VariantPointers pool2d_backward_pointers(const Strided& dx, const Strided& dy,
                                         const PoolBackwardInputs& saved) {
  VariantPointers pointers{{kDx, dx.data}, {kDy, dy.data}};
  if (saved.x) pointers.push_back({kX, saved.x->data});
  if (saved.y) pointers.push_back({kY, saved.y->data});
  if (saved.index) pointers.push_back({kIndex, saved.index->data});
  return pointers;
}

bool pool2d_backward(const Strided& dx, const Strided& dy, const PoolBackwardInputs& saved,
                     const kernel::Pool2dParams& p) {
  if (!cudnn_may_pool(p, post_padding_of(p, dx, dy), dx)) return false;
  const Graph graph = pool2d_backward_graph(dx, dy, saved, p);
  return run_plan(graph, pool2d_backward_pointers(dx, dy, saved), kFallbackTier);
}

}  // namespace loom::cudnn
