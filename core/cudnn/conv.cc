#include "core/cudnn/conv.h"

#include <string>

#include "core/cuda/kernel_choice.h"
#include "core/cudnn/context.h"
#include "core/cudnn/conv_legacy.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/tensor_spec.h"
#include "core/error.h"
#include "core/numerics.h"

namespace loom::cudnn {

namespace {

enum Uid : int64_t { kX = 1, kW = 2, kY = 3 };

// bfloat16 and float16 tensors compute in FLOAT too (BF16 -> FLOAT in cuDNN's terms).
cudnnDataType_t compute_type(DType dtype) {
  return dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

constexpr std::string_view kGraphTier = "graph", kLegacyTier = "legacy";

// Under strict fp32 the graph API offers only FMA engines, and for some
// shapes the legacy API's (FFT among them) are faster: resnet9's wgrad on the
// H100 took its step to 37 ms against PyTorch's 32. Which wins is measured per
// key; deterministic runs skip the race, whose outcome can vary between runs.
bool legacy_wins(ConvDirection direction, const Graph& graph, const Strided& x, const Strided& w,
                 const Strided& y, const cpu::ConvParams& p) {
  const NumericsPolicy& policy = numerics_policy();
  if (policy.precision != Precision::StrictFp32 || policy.deterministic || x.dtype != DType::Float32) {
    return false;
  }
  static cuda::KernelChoice choice("LOOM_CONV_STRICT_KERNEL");
  const std::string pick =
      choice.choose(graph.pattern(), {std::string(kGraphTier), std::string(kLegacyTier)}, [&] {
        return cuda::CandidateRuns{
            [&] { return run_plan(graph, conv_pointers(x, w, y), ""); },
            [&] { return conv2d_legacy(direction, x, w, y, p).empty(); }};
      });
  return pick == kLegacyTier && conv2d_legacy(direction, x, w, y, p).empty();
}

// (x, w, y) are (dx, w, dy) for dgrad and (x, dw, dy) for wgrad.
void run(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
         const cpu::ConvParams& p) {
  const Graph graph = conv2d_graph(direction, x, w, y, p);
  if (legacy_wins(direction, graph, x, w, y, p)) return;
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
