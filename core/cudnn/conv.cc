#include "core/cudnn/conv.h"

#include <fmt/format.h>

#include "core/cudnn/context.h"
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

// The numerics policy chooses how fp32 (and fp64) tensors compute; 16-bit
// tensors are already rounded and run on tensor cores under every policy.
bool precision_filter_applies(DType dtype) {
  return dtype != DType::BFloat16 && dtype != DType::Float16;
}

struct ConvCall {
  ConvDirection direction;
  GraphKind kind;
  const Strided& x;  // x, or dx for dgrad
  const Strided& w;  // w, or dw for wgrad
  const Strided& y;  // y, or dy for dgrad and wgrad
};

void run(const ConvCall& call, const cpu::ConvParams& p) {
  TensorSpec xs = spec_of(call.x, kX), ws = spec_of(call.w, kW), ys = spec_of(call.y, kY);
  PlanKey key(call.kind, numerics_policy());
  key.add_tensor(xs).add_tensor(ws).add_tensor(ys);
  add_conv_params(key, p);
  std::string name = conv_graph_name(call.kind, call.x, call.w, p);
  std::shared_ptr<const Plan> plan = PlanCache::global().get(key, [&] {
    Graph graph(name);
    graph.add_tensor(xs);
    graph.add_tensor(ws);
    graph.add_tensor(ys);
    graph.conv(call.direction, kX, kW, kY, conv_geometry(p), compute_type(call.x.dtype));
    return graph;
  }, precision_filter_applies(call.x.dtype));
  LOOM_CHECK(plan != nullptr, CudnnError,
             "[conv2d] cuDNN has no engine for {} under the {} numerics policy ({}); try another "
             "policy or layout",
             name, precision_name(numerics_policy().precision),
             PlanCache::global().why_unsupported(key));
  plan->execute(handle(), {{kX, call.x.data}, {kW, call.w.data}, {kY, call.y.data}},
                workspace(static_cast<size_t>(plan->workspace_bytes())));
}

}  // namespace

ConvGeometry conv_geometry(const cpu::ConvParams& p) {
  return {.stride = {p.stride_h, p.stride_w},
          .pre_padding = {p.pad_h, p.pad_w},
          .post_padding = {p.pad_h, p.pad_w},
          .dilation = {p.dilation_h, p.dilation_w}};
}

void add_conv_params(PlanKey& key, const cpu::ConvParams& p) {
  key.add({p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w});
}

std::string conv_graph_name(GraphKind kind, const Strided& x, const Strided& w,
                            const cpu::ConvParams& p) {
  return fmt::format("{} x{} w{} s{}x{} p{}x{} d{}x{}", graph_kind_name(kind), describe(x),
                     shape_str(w.sizes), p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h,
                     p.dilation_w);
}

void conv2d_forward(const Strided& y, const Strided& x, const Strided& w, const cpu::ConvParams& p) {
  run({ConvDirection::Forward, GraphKind::ConvForward, x, w, y}, p);
}

void conv2d_dgrad(const Strided& dx, const Strided& dy, const Strided& w, const cpu::ConvParams& p) {
  run({ConvDirection::BackwardData, GraphKind::ConvBackwardData, dx, w, dy}, p);
}

void conv2d_wgrad(const Strided& dw, const Strided& dy, const Strided& x, const cpu::ConvParams& p) {
  run({ConvDirection::BackwardFilter, GraphKind::ConvBackwardFilter, x, dw, dy}, p);
}

}  // namespace loom::cudnn
