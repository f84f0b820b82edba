// File: core/cudnn/conv.cc
// 2-D convolution on the GPU (fprop, dgrad, wgrad) through cached cuDNN graphs.
#include "core/cudnn/conv.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <optional>
#include <string>

#include "core/cuda/kernel_choice.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
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

// A 16-byte-aligned device copy of a dense tensor whose pointer is less aligned
// (fully_aligned, tensor_spec.h, says why no engine may see it): conv has no
// Loom kernel below cuDNN, so it runs on copies. Copies happen in stream order.
class AlignedCopy {
 public:
  AlignedCopy(const Strided& original, bool copy_in) : original_(original), copy_(original) {
    device_ = cuda::current_device();
    copy_.data = cuda::malloc_device(bytes(), device_);
    if (copy_in) copy(copy_.data, original_.data);
  }
  ~AlignedCopy() { cuda::free_device(copy_.data, device_); }
  AlignedCopy(const AlignedCopy&) = delete;
  AlignedCopy& operator=(const AlignedCopy&) = delete;

  const Strided& view() const { return copy_; }
  void copy_back() const { copy(original_.data, copy_.data); }

 private:
  // Dense (spec_of checks it), so the elements fill one byte range from data.
  size_t bytes() const { return static_cast<size_t>(original_.numel()) * element_size(original_.dtype); }
  void copy(void* to, const void* from) const {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes(), cudaMemcpyDeviceToDevice, cuda::current_stream()));
  }

  Strided original_;
  Strided copy_;
  int device_ = 0;
};

bool under_aligned(const Strided& t) { return t.numel() > 0 && pointer_alignment(t.data) < kFullAlignment; }

bool run_aligned(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
                 const kernel::ConvParams& p, WhilePending pending);

// (x, w, y) are (dx, w, dy) for dgrad and (x, dw, dy) for wgrad.
bool run(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
         const kernel::ConvParams& p, WhilePending pending) {
  if (!under_aligned(x) && !under_aligned(w) && !under_aligned(y)) {
    return run_aligned(direction, x, w, y, p, pending);
  }
  // The output is written whole (beta 0), so only the inputs are copied in.
  const Strided* output = direction == ConvDirection::Forward        ? &y
                          : direction == ConvDirection::BackwardData ? &x
                                                                     : &w;
  std::optional<AlignedCopy> copies[3];
  const Strided* operands[3] = {&x, &w, &y};
  Strided views[3] = {x, w, y};
  for (int i = 0; i < 3; ++i) {
    if (!under_aligned(*operands[i])) continue;
    copies[i].emplace(*operands[i], /*copy_in=*/operands[i] != output);
    views[i] = copies[i]->view();
  }
  if (!run_aligned(direction, views[0], views[1], views[2], p, pending)) return false;
  for (int i = 0; i < 3; ++i) {
    if (copies[i] && operands[i] == output) copies[i]->copy_back();
  }
  return true;
}

// Under strict fp32 the legacy API's non-fused Winograd kernels ran resnet9's
// dgrad plus wgrad (batch 128, NCHW) 2.1-3.0x faster than the fastest graph
// engine the policy allows (H200, cuDNN 9.19), and the graph API offers no
// such engine; on the 3-channel first layer the graph plan won. So where the
// policy admits Winograd (winograd_admitted, conv_legacy.h) the two race per
// key (kernel_choice.h; LOOM_CONV_WINOGRAD=graph or winograd forces one). A
// graph whose plan lazy mode still builds leaves the race until the swap.
cuda::KernelChoice& winograd_choice() {
  static cuda::KernelChoice choice("LOOM_CONV_WINOGRAD");
  return choice;
}

bool winograd_chosen(const Graph& graph, ConvDirection direction, const Strided& x, const Strided& w,
                     const Strided& y, const kernel::ConvParams& p) {
  if (!winograd_admitted(direction, x, w, y)) return false;
  const std::string key = fmt::format("conv winograd {}", fmt::join(plan_key(graph).values(), " "));
  // Both candidates write the output, which the pick then overwrites.
  const std::string pick = winograd_choice().choose(key, {"graph", "winograd"}, [&] {
    return cuda::CandidateRuns{
        [&] { return run_plan_reporting(graph, conv_pointers(x, w, y), "") == PlanRun::Ran; },
        [&] { return conv2d_winograd(direction, x, w, y, p).empty(); }};
  });
  return pick == "winograd";
}

bool run_aligned(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
                 const kernel::ConvParams& p, WhilePending pending) {
  const Graph graph = conv2d_graph(direction, x, w, y, p);
  if (winograd_chosen(graph, direction, x, w, y, p) && conv2d_winograd(direction, x, w, y, p).empty()) {
    return true;
  }
  constexpr std::string_view kLegacy = "cuDNN's legacy convolution API";
  const PlanRun outcome = run_plan_reporting(graph, conv_pointers(x, w, y), kLegacy);
  if (outcome == PlanRun::Ran) return true;
  if (outcome == PlanRun::Pending && pending == WhilePending::Skip) return false;
  const std::string legacy = conv2d_legacy(direction, x, w, y, p);
  LOOM_CHECK(legacy.empty(), CudnnError,
             "[conv2d] no tier can run {} under the {} numerics policy: graph API: {}; {}; try "
             "another policy or layout",
             graph.pattern(), precision_name(numerics_policy().precision),
             PlanCache::global().why_unsupported(plan_key(graph)), legacy);
  return true;
}

}  // namespace

Graph conv2d_graph(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
                   const kernel::ConvParams& p) {
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

bool conv2d_forward(const Strided& y, const Strided& x, const Strided& w, const kernel::ConvParams& p,
                    WhilePending pending) {
  return run(ConvDirection::Forward, x, w, y, p, pending);
}

bool conv2d_dgrad(const Strided& dx, const Strided& dy, const Strided& w, const kernel::ConvParams& p,
                  WhilePending pending) {
  return run(ConvDirection::BackwardData, dx, w, dy, p, pending);
}

bool conv2d_wgrad(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p,
                  WhilePending pending) {
  return run(ConvDirection::BackwardFilter, x, dw, dy, p, pending);
}

}  // namespace loom::cudnn
