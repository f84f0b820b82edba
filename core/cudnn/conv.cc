#include "core/cudnn/conv.h"

#include <fmt/format.h>

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

struct ConvCall {
  ConvDirection direction;
  GraphKind kind;
  const Strided& x;  // x, or dx for dgrad
  const Strided& w;  // w, or dw for wgrad
  const Strided& y;  // y, or dy for dgrad and wgrad
};

PlanKey conv_key(const ConvCall& call, const cpu::ConvParams& p) {
  PlanKey key(call.kind, numerics_policy());
  key.add_tensor(spec_of(call.x, kX)).add_tensor(spec_of(call.w, kW)).add_tensor(spec_of(call.y, kY));
  add_conv_params(key, p);
  return key;
}

Graph conv_graph(const ConvCall& call, const cpu::ConvParams& p) {
  Graph graph(conv_graph_name(call.kind, call.x, call.w, p));
  graph.add_tensor(spec_of(call.x, kX));
  graph.add_tensor(spec_of(call.w, kW));
  graph.add_tensor(spec_of(call.y, kY));
  graph.conv(call.direction, kX, kW, kY, conv_geometry(p), compute_type(call.x.dtype));
  return graph;
}

ConvCall conv_call(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y) {
  constexpr GraphKind kKinds[] = {GraphKind::ConvForward, GraphKind::ConvBackwardData,
                                  GraphKind::ConvBackwardFilter};
  return {direction, kKinds[static_cast<int>(direction)], x, w, y};
}

void run(const ConvCall& call, const cpu::ConvParams& p) {
  PlanKey key = conv_key(call, p);
  std::shared_ptr<const Plan> plan = PlanCache::global().get(
      key, [&] { return conv_graph(call, p); }, /*precision_filter_applies=*/true);
  if (!plan) {
    PlanCache::global().record_fallback(key, "cuDNN's legacy convolution API");
    const std::string legacy = conv2d_legacy(call.direction, call.x, call.w, call.y, p);
    LOOM_CHECK(legacy.empty(), CudnnError,
               "[conv2d] no tier can run {} under the {} numerics policy: graph API: {}; {}; try "
               "another policy or layout",
               conv_graph_name(call.kind, call.x, call.w, p),
               precision_name(numerics_policy().precision), PlanCache::global().why_unsupported(key),
               legacy);
    return;
  }
  plan->execute(handle(), conv_pointers(call.x, call.w, call.y),
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

Graph conv2d_graph(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
                   const cpu::ConvParams& p) {
  return conv_graph(conv_call(direction, x, w, y), p);
}

VariantPointers conv_pointers(const Strided& x, const Strided& w, const Strided& y) {
  return {{kX, x.data}, {kW, w.data}, {kY, y.data}};
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
