// File: core/cudnn/pointwise.cc
// Elementwise activations forward and backward as cuDNN pointwise graphs.
#include "core/cudnn/pointwise.h"

#include <algorithm>
#include <optional>

#include "core/cudnn/plan_cache.h"
#include "core/cudnn/tensor_spec.h"

namespace loom::cudnn {

namespace {

// What runs a key cuDNN has no engine for (the op calls it when this layer returns false).
constexpr std::string_view kFallbackTier = "Loom CUDA kernels (core/cuda/elementwise.h)";

enum Uid : int64_t { kX = 1, kY, kDy, kDx, kDyAddend, kDySum };

constexpr int64_t kRow = 64;  // the packed NHWC view's channel count

bool is_dense(const Strided& t) {
  // Dense in some dim order: the strides are a permutation of a packed layout.
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] != 1) dims.push_back({t.strides[d], t.sizes[d]});
  }
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (auto [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

// The flat (n / 64, 64, 1, 1) NHWC view of a dense tensor, if n allows it.
std::optional<TensorSpec> flat_spec(const Strided& t, int64_t uid) {
  int64_t n = t.numel();
  if (n == 0 || n % kRow != 0 || !is_dense(t)) return std::nullopt;
  return TensorSpec{.uid = uid,
                    .dims = {n / kRow, kRow, 1, 1},
                    .strides = {kRow, 1, kRow, kRow},
                    .dtype = cudnn_dtype(t.dtype),
                    .alignment = pointer_alignment(t.data)};
}

// Data pointers of a dense tensor start at its lowest address, which is
// Strided::data when every stride is positive (always, for Loom's dense tensors).
bool same_layout(const Strided& a, const Strided& b) { return a.sizes == b.sizes && a.strides == b.strides; }

}  // namespace

std::optional<Graph> pointwise_forward_graph(PointwiseMode mode, const Strided& y, const Strided& x) {
  auto xs = flat_spec(x, kX), ys = flat_spec(y, kY);
  if (!xs || !ys || !same_layout(x, y)) return std::nullopt;
  Graph g;
  g.add_tensor(*xs);
  g.add_tensor(*ys);
  g.pointwise(mode.mode, kX, std::nullopt, kY, mode.scalars);
  return g;
}

VariantPointers pointwise_forward_pointers(const Strided& y, const Strided& x) {
  return {{kX, x.data}, {kY, y.data}};
}

bool pointwise_forward(PointwiseMode mode, const Strided& y, const Strided& x) {
  std::optional<Graph> graph = pointwise_forward_graph(mode, y, x);
  return graph && run_plan(*graph, pointwise_forward_pointers(y, x), kFallbackTier);
}

std::optional<Graph> pointwise_backward_graph(PointwiseMode mode, const Strided& dx, const Strided& dy,
                                              const Strided& saved, const std::optional<Strided>& dy_addend) {
  auto dxs = flat_spec(dx, kDx), dys = flat_spec(dy, kDy), xs = flat_spec(saved, kX);
  if (!dxs || !dys || !xs || !same_layout(dx, dy) || !same_layout(dx, saved)) return std::nullopt;
  Graph g;
  g.add_tensor(*dxs);
  g.add_tensor(*dys);
  g.add_tensor(*xs);
  int64_t grad = kDy;
  if (dy_addend) {
    auto addend = flat_spec(*dy_addend, kDyAddend);
    if (!addend || !same_layout(dx, *dy_addend)) return std::nullopt;
    g.add_tensor(*addend);
    g.add_tensor(virtual_like(*dys, kDySum));
    g.pointwise(CUDNN_POINTWISE_ADD, kDy, kDyAddend, kDySum);
    grad = kDySum;
  }
  g.pointwise_backward(mode.mode, grad, kX, kDx, mode.scalars);
  return g;
}

VariantPointers pointwise_backward_pointers(const Strided& dx, const Strided& dy, const Strided& saved,
                                            const std::optional<Strided>& dy_addend) {
  VariantPointers pointers = {{kDx, dx.data}, {kDy, dy.data}, {kX, saved.data}};
  if (dy_addend) pointers.push_back({kDyAddend, dy_addend->data});
  return pointers;
}

bool pointwise_backward(PointwiseMode mode, const Strided& dx, const Strided& dy, const Strided& saved,
                        const std::optional<Strided>& dy_addend) {
  std::optional<Graph> graph = pointwise_backward_graph(mode, dx, dy, saved, dy_addend);
  return graph && run_plan(*graph, pointwise_backward_pointers(dx, dy, saved, dy_addend), kFallbackTier);
}

namespace {

struct Modes {
  cudnnPointwiseMode_t forward, backward;
};

std::optional<Modes> modes_of(kernel::CudnnActivation a) {
  switch (a) {
    case kernel::CudnnActivation::None: return std::nullopt;
    case kernel::CudnnActivation::Relu:
    case kernel::CudnnActivation::ClippedRelu: return Modes{CUDNN_POINTWISE_RELU_FWD, CUDNN_POINTWISE_RELU_BWD};
    case kernel::CudnnActivation::Tanh: return Modes{CUDNN_POINTWISE_TANH_FWD, CUDNN_POINTWISE_TANH_BWD};
    case kernel::CudnnActivation::Sigmoid: return Modes{CUDNN_POINTWISE_SIGMOID_FWD, CUDNN_POINTWISE_SIGMOID_BWD};
    case kernel::CudnnActivation::Elu: return Modes{CUDNN_POINTWISE_ELU_FWD, CUDNN_POINTWISE_ELU_BWD};
    case kernel::CudnnActivation::Gelu: return Modes{CUDNN_POINTWISE_GELU_FWD, CUDNN_POINTWISE_GELU_BWD};
    case kernel::CudnnActivation::GeluTanh:
      return Modes{CUDNN_POINTWISE_GELU_APPROX_TANH_FWD, CUDNN_POINTWISE_GELU_APPROX_TANH_BWD};
    case kernel::CudnnActivation::Softplus:
      return Modes{CUDNN_POINTWISE_SOFTPLUS_FWD, CUDNN_POINTWISE_SOFTPLUS_BWD};
    case kernel::CudnnActivation::Swish: return Modes{CUDNN_POINTWISE_SWISH_FWD, CUDNN_POINTWISE_SWISH_BWD};
  }
  return std::nullopt;
}

// The attributes a row's scalars set. A clipped ReLU always sets both clips
// (ReLU6 has no names, only fixed bounds); the other modes take the row's one
// parameter where it has one, else keep cuDNN's default (SiLU is swish with beta 1).
PointwiseScalars scalars_of(kernel::CudnnActivation a, const kernel::ActivationInfo& row,
                            const kernel::ActivationParameters& p) {
  if (a == kernel::CudnnActivation::ClippedRelu) {
    return {{CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, p[0]}, {CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, p[1]}};
  }
  if (kernel::parameter_count(row) == 0) return {};
  switch (a) {
    case kernel::CudnnActivation::Relu: return {{CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, p[0]}};
    case kernel::CudnnActivation::Elu: return {{CUDNN_ATTR_POINTWISE_ELU_ALPHA, p[0]}};
    case kernel::CudnnActivation::Softplus: return {{CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA, p[0]}};
    case kernel::CudnnActivation::Swish: return {{CUDNN_ATTR_POINTWISE_SWISH_BETA, p[0]}};
    default: return {};
  }
}

}  // namespace

std::optional<PointwiseMode> activation_mode(kernel::ActivationKind kind, bool backward,
                                             const kernel::ActivationParameters& parameters) {
  const kernel::ActivationInfo& row = kernel::activation_info(kind);
  const kernel::CudnnActivation a = backward ? row.cudnn_backward : row.cudnn_forward;
  std::optional<Modes> m = modes_of(a);
  if (!m) return std::nullopt;
  return PointwiseMode{backward ? m->backward : m->forward, scalars_of(a, row, parameters)};
}

bool activation_forward(kernel::ActivationKind kind, const kernel::ActivationParameters& parameters,
                        const Strided& y, const Strided& x) {
  std::optional<PointwiseMode> mode = activation_mode(kind, /*backward=*/false, parameters);
  return mode && pointwise_forward(*mode, y, x);
}

bool activation_backward(kernel::ActivationKind kind, const kernel::ActivationParameters& parameters,
                         const Strided& dx, const Strided& dy, const Strided& saved,
                         const std::optional<Strided>& dy_addend) {
  std::optional<PointwiseMode> mode = activation_mode(kind, /*backward=*/true, parameters);
  return mode && pointwise_backward(*mode, dx, dy, saved, dy_addend);
}

}  // namespace loom::cudnn
