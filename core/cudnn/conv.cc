#include "core/cudnn/conv.h"

#include "core/cudnn/context.h"
#include "core/cudnn/conv_legacy.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/tensor_spec.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

enum Uid : int64_t { kX = 1, kW = 2, kY = 3 };

// bfloat16 and float16 tensors compute in FLOAT too (BF16 -> FLOAT in cuDNN's terms).
cudnnDataType_t compute_type(DType dtype) {
  return dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

// (x, w, y) are (dx, w, dy) for dgrad and (x, dw, dy) for wgrad.
void run(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
         const cpu::ConvParams& p) {
  const Graph graph = conv2d_graph(direction, x, w, y, p);
  constexpr std::string_view kLegacy = "cuDNN's legacy convolution API";
  if (run_plan(graph, conv_pointers(x, w, y), kLegacy)) return;
  const std::string legacy = conv2d_legacy(direction, x, w, y, p);
  LOOM_CHECK(legacy.empty(), CudnnError,
             "[conv2d] no tier can run {} under the {} numerics policy: graph API: {}; {}; try "
             "another policy or layout",
             graph.pattern(), precision_name(numerics_policy().precision),
             PlanCache::global().why_unsupported(plan_key(graph)), legacy);
}

}  // namespace

Graph conv2d_graph(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
                   const cpu::ConvParams& p) {
  Graph graph;
  graph.add_tensor(spec_of(x, kX));
  graph.add_tensor(spec_of(w, kW));
  graph.add_tensor(spec_of(y, kY));
  graph.conv(direction, kX, kW, kY, p, compute_type(x.dtype));
  return graph;
}

VariantPointers conv_pointers(const Strided& x, const Strided& w, const Strided& y) {
  return {{kX, x.data}, {kW, w.data}, {kY, y.data}};
}

void conv2d_forward(const Strided& y, const Strided& x, const Strided& w, const cpu::ConvParams& p) {
  run(ConvDirection::Forward, x, w, y, p);
}

void conv2d_dgrad(const Strided& dx, const Strided& dy, const Strided& w, const cpu::ConvParams& p) {
  run(ConvDirection::BackwardData, dx, w, dy, p);
}

void conv2d_wgrad(const Strided& dw, const Strided& dy, const Strided& x, const cpu::ConvParams& p) {
  run(ConvDirection::BackwardFilter, x, dw, dy, p);
}

}  // namespace loom::cudnn
