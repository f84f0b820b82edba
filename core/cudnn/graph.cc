// File: core/cudnn/graph.cc
// Graph nodes (conv, matmul, pointwise, norms, ...), their names and their descriptors.
#include "core/cudnn/graph.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "core/cudnn/tensor_spec.h"
#include "core/error.h"
#include "core/shape.h"

namespace loom::cudnn {

namespace {

using Fraction = cudnnFraction_t;

std::vector<Fraction> fractions(std::span<const int64_t> values) {
  std::vector<Fraction> out;
  for (int64_t v : values) out.push_back({v, 1});
  return out;
}

// alpha/beta attributes are FLOAT for float data and DOUBLE for double data.
void set_scaling(Descriptor& op, cudnnBackendAttributeName_t alpha,
                 cudnnBackendAttributeName_t beta, cudnnDataType_t data) {
  if (data == CUDNN_DATA_DOUBLE) {
    op.set_double(alpha, 1.0).set_double(beta, 0.0);
  } else {
    op.set_float(alpha, 1.0f).set_float(beta, 0.0f);
  }
}

// The three conv directions are one operation with different attribute names.
struct ConvAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};
const ConvAttributes kConvAttributes[] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
};

std::string pointwise_name(int64_t mode) {
  switch (static_cast<cudnnPointwiseMode_t>(mode)) {
    case CUDNN_POINTWISE_ADD: return "add";
    case CUDNN_POINTWISE_MUL: return "mul";
    case CUDNN_POINTWISE_SUB: return "sub";
    case CUDNN_POINTWISE_DIV: return "div";
    case CUDNN_POINTWISE_MAX: return "max";
    case CUDNN_POINTWISE_MIN: return "min";
    case CUDNN_POINTWISE_EXP: return "exp";
    case CUDNN_POINTWISE_LOG: return "log";
    case CUDNN_POINTWISE_IDENTITY: return "identity";
    case CUDNN_POINTWISE_RELU_FWD: return "relu_fwd";
    case CUDNN_POINTWISE_TANH_FWD: return "tanh_fwd";
    case CUDNN_POINTWISE_SIGMOID_FWD: return "sigmoid_fwd";
    case CUDNN_POINTWISE_ELU_FWD: return "elu_fwd";
    case CUDNN_POINTWISE_GELU_FWD: return "gelu_fwd";
    case CUDNN_POINTWISE_SOFTPLUS_FWD: return "softplus_fwd";
    case CUDNN_POINTWISE_SWISH_FWD: return "swish_fwd";
    case CUDNN_POINTWISE_GELU_APPROX_TANH_FWD: return "gelu_tanh_fwd";
    case CUDNN_POINTWISE_RELU_BWD: return "relu_bwd";
    case CUDNN_POINTWISE_TANH_BWD: return "tanh_bwd";
    case CUDNN_POINTWISE_SIGMOID_BWD: return "sigmoid_bwd";
    case CUDNN_POINTWISE_ELU_BWD: return "elu_bwd";
    case CUDNN_POINTWISE_GELU_BWD: return "gelu_bwd";
    case CUDNN_POINTWISE_SOFTPLUS_BWD: return "softplus_bwd";
    case CUDNN_POINTWISE_SWISH_BWD: return "swish_bwd";
    case CUDNN_POINTWISE_GELU_APPROX_TANH_BWD: return "gelu_tanh_bwd";
    case CUDNN_POINTWISE_CMP_GT: return "cmp_gt";
    default: return fmt::format("pointwise{}", mode);
  }
}

// "bn", "ln", ...: the norm mode's short name.
std::string norm_name(int64_t mode) {
  switch (mode) {
    case CUDNN_BATCH_NORM: return "bn";
    case CUDNN_LAYER_NORM: return "ln";
    case CUDNN_INSTANCE_NORM: return "in";
    case CUDNN_GROUP_NORM: return "gn";
    case CUDNN_RMS_NORM: return "rms";
    default: return fmt::format("norm{}", mode);
  }
}

std::string node_name(const Node& n) {
  switch (n.kind) {
    case NodeKind::ConvForward: return "conv_fprop";
    case NodeKind::ConvBackwardData: return "conv_dgrad";
    case NodeKind::ConvBackwardFilter: return "conv_wgrad";
    case NodeKind::Matmul: return "matmul";
    case NodeKind::Pointwise: return pointwise_name(n.mode);
    case NodeKind::Reduction: return "reduction";
    case NodeKind::NormForward:
      return fmt::format("{}_fwd_{}", norm_name(n.mode), n.phase == CUDNN_NORM_FWD_TRAINING ? "train" : "infer");
    case NodeKind::NormBackward: return norm_name(n.mode) + "_bwd";
    case NodeKind::ResampleForward:
      return n.mode == CUDNN_RESAMPLE_MAXPOOL ? "maxpool_fwd" : "avgpool_fwd";
    case NodeKind::ResampleBackward:
      return n.mode == CUDNN_RESAMPLE_MAXPOOL ? "maxpool_bwd" : "avgpool_bwd";
    case NodeKind::GenStats: return "genstats";
    case NodeKind::BnFinalize: return "bn_finalize";
    case NodeKind::BnBackwardWeights: return "bn_bwd_weights";
  }
  return "?";
}

std::string_view dtype_short(cudnnDataType_t dtype) {
  switch (dtype) {
    case CUDNN_DATA_FLOAT: return "f32";
    case CUDNN_DATA_DOUBLE: return "f64";
    case CUDNN_DATA_HALF: return "f16";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    case CUDNN_DATA_INT8: return "i8";
    case CUDNN_DATA_BOOLEAN: return "bool";
    default: return "other";
  }
}

// "(8, 3, 32, 32) nhwc f32"
std::string describe_spec(const TensorSpec& t) {
  const bool nhwc = t.dims.size() == 4 && t.dims[1] > 1 && t.strides[1] == 1;
  return fmt::format("({}){} {}", fmt::join(t.dims, ", "), nhwc ? " nhwc" : "", dtype_short(t.dtype));
}

// Whether a pointwise mode has the scalar attribute `attribute`.
bool pointwise_takes(int64_t mode, cudnnBackendAttributeName_t attribute) {
  switch (static_cast<cudnnPointwiseMode_t>(mode)) {
    case CUDNN_POINTWISE_RELU_FWD:
    case CUDNN_POINTWISE_RELU_BWD:
      return attribute == CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE ||
             attribute == CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP || attribute == CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP;
    case CUDNN_POINTWISE_ELU_FWD:
    case CUDNN_POINTWISE_ELU_BWD: return attribute == CUDNN_ATTR_POINTWISE_ELU_ALPHA;
    case CUDNN_POINTWISE_SOFTPLUS_FWD:
    case CUDNN_POINTWISE_SOFTPLUS_BWD: return attribute == CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA;
    case CUDNN_POINTWISE_SWISH_FWD:
    case CUDNN_POINTWISE_SWISH_BWD: return attribute == CUDNN_ATTR_POINTWISE_SWISH_BETA;
    default: return false;
  }
}

}  // namespace

// The handle attributes are deprecated in 9.19, but without one the heuristics
// do not see the device (probed on an H100: 2 configs, both failing at execute
// with NOT_SUPPORTED_ARCH_MISMATCH, instead of dozens).
void set_handle(Descriptor& d, cudnnBackendAttributeName_t name, cudnnHandle_t handle) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  d.set(name, CUDNN_TYPE_HANDLE, 1, &handle);
#pragma GCC diagnostic pop
}

// ---- the description ------------------------------------------------------------------

void Graph::add_tensor(const TensorSpec& spec) {
  LOOM_CHECK(std::none_of(specs_.begin(), specs_.end(),
                          [&](const TensorSpec& t) { return t.uid == spec.uid; }),
             ValueError, "[cudnn graph {}] tensor uid {} added twice", pattern(), spec.uid);
  specs_.push_back(spec);
}

namespace {

bool dense_as(const TensorSpec& s, MemoryFormat format) {
  return s.dims.size() == 4 && s.strides.size() == 4 && has_layout(s.dims, s.strides, format);
}

}  // namespace

// cuDNN reads each operand's layout from its strides, and spec_of describes an
// operand that is dense in both layouts (a depthwise filter (C, 1, R, S), a
// 1 x 1 map, one channel) as NCHW. Beside channels-last operands that made a
// mixed-layout conv, which only cuDNN's generic grouped kernels ran: the
// MobileNetV2 depthwise data gradient took about 230 us there, against about
// 25 us in its NHWC kernels. The bytes are the same in either description.
void Graph::one_layout(std::initializer_list<int64_t> uids) {
  std::vector<TensorSpec*> operands;
  for (TensorSpec& s : specs_) {
    if (std::find(uids.begin(), uids.end(), s.uid) != uids.end()) operands.push_back(&s);
  }
  const bool channels_last = std::any_of(operands.begin(), operands.end(), [](const TensorSpec* s) {
    return channels_last_only(s->dims, s->strides);
  });
  if (!channels_last) return;
  for (TensorSpec* s : operands) {
    if (dense_as(*s, MemoryFormat::ChannelsLast)) s->strides = strides_for(s->dims, MemoryFormat::ChannelsLast);
  }
}

void Graph::conv(ConvDirection direction, int64_t x, int64_t w, int64_t y, const kernel::ConvParams& g,
                 cudnnDataType_t compute) {
  one_layout({x, w, y});
  const ConvAttributes& a = kConvAttributes[static_cast<int>(direction)];
  Node node{.kind = static_cast<NodeKind>(static_cast<int>(direction)), .compute = compute,
            .ports = {{a.x, x}, {a.w, w}, {a.y, y}}};
  // stride, pre-padding, post-padding, dilation: (H, W) each, as the descriptor takes them
  node.params = {g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.pad_h, g.pad_w, g.dilation_h, g.dilation_w};
  add_node(std::move(node));
}

void Graph::matmul(int64_t a, int64_t b, int64_t c, cudnnDataType_t compute) {
  add_node({.kind = NodeKind::Matmul, .compute = compute,
            .ports = {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, a},
                      {CUDNN_ATTR_OPERATION_MATMUL_BDESC, b},
                      {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c}}});
}

void Graph::pointwise(cudnnPointwiseMode_t mode, int64_t x, std::optional<int64_t> b, int64_t y,
                      PointwiseScalars scalars) {
  Node node{.kind = NodeKind::Pointwise, .mode = mode, .scalars = std::move(scalars),
            .ports = {{CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
                      {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}}};
  if (b) node.ports.push_back({CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b});
  add_node(std::move(node));
}

void Graph::pointwise_backward(cudnnPointwiseMode_t mode, int64_t dy, int64_t x, int64_t dx,
                               PointwiseScalars scalars) {
  add_node({.kind = NodeKind::Pointwise, .mode = mode, .scalars = std::move(scalars),
            .ports = {{CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, dy},
                      {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
                      {CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, dx}}});
}

void Graph::reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y) {
  add_node({.kind = NodeKind::Reduction, .mode = op,
            .ports = {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x},
                      {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y}}});
}

namespace {

using NormPort = std::pair<std::optional<int64_t> Graph::NormPorts::*, cudnnBackendAttributeName_t>;

// The ports each phase takes, in the order the node binds them (part of the
// canonical form, so of every plan key).
const std::vector<NormPort>& norm_port_table(Graph::NormPhase phase) {
  using P = Graph::NormPorts;
  static const std::vector<NormPort> kTrain = {
      {&P::x, CUDNN_ATTR_OPERATION_NORM_FWD_XDESC},
      {&P::scale, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC},
      {&P::bias, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC},
      {&P::epsilon, CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC},
      {&P::momentum, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC},
      {&P::in_running_mean, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC},
      {&P::in_running_var, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC},
      {&P::y, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC},
      {&P::mean, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC},
      {&P::inv_variance, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC},
      {&P::out_running_mean, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC},
      {&P::out_running_var, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC}};
  static const std::vector<NormPort> kEval = {
      {&P::x, CUDNN_ATTR_OPERATION_NORM_FWD_XDESC},
      {&P::mean, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC},
      {&P::inv_variance, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC},
      {&P::scale, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC},
      {&P::bias, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC},
      {&P::y, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC}};
  static const std::vector<NormPort> kBackward = {
      {&P::x, CUDNN_ATTR_OPERATION_NORM_BWD_XDESC},
      {&P::dy, CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC},
      {&P::scale, CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC},
      {&P::mean, CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC},
      {&P::inv_variance, CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC},
      {&P::dx, CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC},
      {&P::dscale, CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC},
      {&P::dbias, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC}};
  switch (phase) {
    case Graph::NormPhase::Train: return kTrain;
    case Graph::NormPhase::Eval: return kEval;
    case Graph::NormPhase::Backward: return kBackward;
  }
  return kBackward;
}

constexpr std::optional<int64_t> Graph::NormPorts::*kAllNormPorts[] = {
    &Graph::NormPorts::x, &Graph::NormPorts::scale, &Graph::NormPorts::bias,
    &Graph::NormPorts::epsilon, &Graph::NormPorts::momentum, &Graph::NormPorts::in_running_mean,
    &Graph::NormPorts::in_running_var, &Graph::NormPorts::y, &Graph::NormPorts::mean,
    &Graph::NormPorts::inv_variance, &Graph::NormPorts::out_running_mean,
    &Graph::NormPorts::out_running_var, &Graph::NormPorts::dy, &Graph::NormPorts::dx,
    &Graph::NormPorts::dscale, &Graph::NormPorts::dbias};

}  // namespace

void Graph::norm(cudnnBackendNormMode_t mode, NormPhase phase, const NormPorts& ports) {
  const std::vector<NormPort>& table = norm_port_table(phase);
  Node node{.kind = phase == NormPhase::Backward ? NodeKind::NormBackward : NodeKind::NormForward,
            .mode = mode,
            .phase = phase == NormPhase::Eval ? CUDNN_NORM_FWD_INFERENCE : CUDNN_NORM_FWD_TRAINING};
  size_t given = 0;
  for (const auto member : kAllNormPorts) given += (ports.*member).has_value() ? 1 : 0;
  for (const auto& [member, attribute] : table) {
    if (const std::optional<int64_t>& uid = ports.*member) node.ports.emplace_back(attribute, *uid);
  }
  LOOM_CHECK(ports.x && node.ports.size() == given, ValueError,
             "[cudnn graph] norm node ({}, phase {}) got {} ports but its phase takes {} of them "
             "(x {}); bind only the ports Graph::norm lists for the phase",
             node_name(node), static_cast<int>(phase), given, node.ports.size(),
             ports.x ? "given" : "missing");
  add_node(std::move(node));
}

void Graph::gen_stats(int64_t x, int64_t sum, int64_t sqsum) {
  add_node({.kind = NodeKind::GenStats, .mode = CUDNN_GENSTATS_SUM_SQSUM,
            .ports = {{CUDNN_ATTR_OPERATION_GENSTATS_XDESC, x},
                      {CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum},
                      {CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum}}});
}

void Graph::bn_finalize(const BnFinalize& u) {
  add_node({.kind = NodeKind::BnFinalize, .mode = CUDNN_BN_FINALIZE_STATISTICS_TRAINING,
            .ports = {{CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SUM_DESC, u.sum},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SQ_SUM_DESC, u.sqsum},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_SCALE_DESC, u.scale},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_BIAS_DESC, u.bias},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_MEAN_DESC, u.prev_running_mean},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_VAR_DESC, u.prev_running_var},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_MEAN_DESC, u.running_mean},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_VAR_DESC, u.running_var},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_MEAN_DESC, u.saved_mean},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_INV_STD_DESC, u.saved_inv_std},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_SCALE_DESC, u.eq_scale},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_BIAS_DESC, u.eq_bias},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_ACCUM_COUNT_DESC, u.accum_count},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_EPSILON_DESC, u.epsilon},
                      {CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC, u.momentum}}});
}

void Graph::bn_backward_weights(const BnBackwardWeights& u) {
  add_node({.kind = NodeKind::BnBackwardWeights,
            .ports = {{CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, u.x},
                      {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, u.dy},
                      {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, u.mean},
                      {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, u.inv_std},
                      {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, u.scale},
                      {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, u.dscale},
                      {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, u.dbias},
                      {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, u.eq_dy_scale},
                      {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, u.eq_x_scale},
                      {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, u.eq_bias}}});
}

namespace {

// window, stride, pre padding, post padding, each (rows, columns).
std::vector<int64_t> pool_params(const kernel::Pool2dParams& p, std::array<int64_t, 2> post_padding) {
  return {p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w, post_padding[0], post_padding[1]};
}

cudnnResampleMode_t resample_mode(const kernel::Pool2dParams& p) {
  return p.max                 ? CUDNN_RESAMPLE_MAXPOOL
         : p.count_include_pad ? CUDNN_RESAMPLE_AVGPOOL_INCLUDE_PADDING
                               : CUDNN_RESAMPLE_AVGPOOL_EXCLUDE_PADDING;
}

}  // namespace

void Graph::resample_forward(const kernel::Pool2dParams& pool, std::array<int64_t, 2> post_padding,
                             int64_t x, int64_t y, std::optional<int64_t> index) {
  Node node{.kind = NodeKind::ResampleForward, .mode = resample_mode(pool),
            .ports = {{CUDNN_ATTR_OPERATION_RESAMPLE_FWD_XDESC, x},
                      {CUDNN_ATTR_OPERATION_RESAMPLE_FWD_YDESC, y}},
            .params = pool_params(pool, post_padding)};
  if (index) node.ports.push_back({CUDNN_ATTR_OPERATION_RESAMPLE_FWD_IDXDESC, *index});
  add_node(std::move(node));
}

void Graph::resample_backward(const kernel::Pool2dParams& pool, std::array<int64_t, 2> post_padding,
                              const ResampleBackward& u) {
  Node node{.kind = NodeKind::ResampleBackward, .mode = resample_mode(pool),
            .ports = {{CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DYDESC, u.dy},
                      {CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DXDESC, u.dx}},
            .params = pool_params(pool, post_padding)};
  if (u.x) node.ports.push_back({CUDNN_ATTR_OPERATION_RESAMPLE_BWD_XDESC, *u.x});
  if (u.y) node.ports.push_back({CUDNN_ATTR_OPERATION_RESAMPLE_BWD_YDESC, *u.y});
  if (u.index) node.ports.push_back({CUDNN_ATTR_OPERATION_RESAMPLE_BWD_IDXDESC, *u.index});
  add_node(std::move(node));
}

bool Graph::has_node(NodeKind kind) const {
  return std::any_of(nodes_.begin(), nodes_.end(), [kind](const Node& n) { return n.kind == kind; });
}

void Graph::append_canonical(std::vector<int64_t>& out) const {
  out.push_back(static_cast<int64_t>(specs_.size()));
  for (const TensorSpec& t : specs_) {
    out.push_back(t.uid);
    out.push_back(static_cast<int64_t>(t.dims.size()));
    out.insert(out.end(), t.dims.begin(), t.dims.end());
    for (size_t i = 0; i < t.strides.size(); ++i) out.push_back(t.dims[i] == 1 ? 0 : t.strides[i]);
    out.insert(out.end(), {static_cast<int64_t>(t.dtype), t.alignment, t.is_virtual, t.by_value});
  }
  out.push_back(static_cast<int64_t>(nodes_.size()));
  for (const Node& n : nodes_) {
    out.insert(out.end(), {static_cast<int64_t>(n.kind), n.mode, n.phase,
                           static_cast<int64_t>(n.compute), static_cast<int64_t>(n.scalars.size())});
    for (const PointwiseScalar& p : n.scalars) {
      out.insert(out.end(), {static_cast<int64_t>(p.attribute), std::bit_cast<int64_t>(p.value)});
    }
    out.push_back(static_cast<int64_t>(n.ports.size()));
    for (const auto& [attribute, uid] : n.ports) out.insert(out.end(), {static_cast<int64_t>(attribute), uid});
    out.push_back(static_cast<int64_t>(n.params.size()));
    out.insert(out.end(), n.params.begin(), n.params.end());
  }
}

void Graph::check_alignment(const std::vector<std::pair<int64_t, const void*>>& pointers) const {
  for (const auto& [uid, ptr] : pointers) {
    auto spec = std::find_if(specs_.begin(), specs_.end(), [uid](const TensorSpec& t) { return t.uid == uid; });
    if (spec == specs_.end() || spec->by_value) continue;
    const int64_t actual = pointer_alignment(ptr);
    LOOM_CHECK(actual >= spec->alignment, ValueError,
               "[cudnn {}] tensor uid {} is bound to {} ({}-byte aligned) but its plan was built "
               "for {}-byte alignment; describe the graph from the pointers it runs with (spec_of) "
               "so the plan key carries their alignment",
               pattern(), uid, ptr, actual, spec->alignment);
  }
}

std::string Graph::pattern() const {
  std::vector<std::string> ops;
  for (const Node& n : nodes_) ops.push_back(node_name(n));
  std::vector<std::string> io;
  for (const TensorSpec& t : specs_) {
    const bool per_channel = t.dims.size() == 4 && t.dims[0] == 1 && t.dims[2] == 1 && t.dims[3] == 1;
    if (!t.is_virtual && !t.by_value && !per_channel) io.push_back(describe_spec(t));
  }
  std::string out = fmt::format("{} {}", fmt::join(ops, "+"), fmt::join(io, " "));
  for (const Node& n : nodes_) {
    if (!n.params.empty()) return fmt::format("{} [{}]", out, fmt::join(n.params, " "));
  }
  return out;
}

// ---- the descriptors -------------------------------------------------------------------

BuiltGraph::BuiltGraph(Graph graph, cudnnHandle_t handle) : graph_(std::move(graph)) {
  for (const TensorSpec& spec : graph_.tensors()) {
    Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    d.set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, spec.dtype)
        .set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, spec.dims)
        .set_int64s(CUDNN_ATTR_TENSOR_STRIDES, spec.strides)
        .set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, spec.uid)
        .set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, spec.alignment)
        .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, spec.is_virtual);
    if (spec.by_value) d.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
    d.finalize();
    tensors_.emplace(spec.uid, std::move(d));
  }
  for (const Node& node : graph_.nodes()) build(node);
  std::vector<const Descriptor*> ops;
  for (const Descriptor& op : operations_) ops.push_back(&op);
  Descriptor op_graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  op_graph.set_descriptors(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops);
  set_handle(op_graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle);
  if (graph_.dynamic_shape()) op_graph.set_bool(CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, true);
  op_graph.finalize();
  operation_graph_ = std::move(op_graph);
}

const Descriptor& BuiltGraph::tensor(int64_t uid) const {
  auto it = tensors_.find(uid);
  LOOM_CHECK(it != tensors_.end(), ValueError, "[cudnn graph {}] no tensor with uid {}",
             graph_.pattern(), uid);
  return it->second;
}

Descriptor& BuiltGraph::keep(Descriptor descriptor) {
  attributes_.push_back(std::move(descriptor));
  return attributes_.back();
}

void BuiltGraph::bind_ports(Descriptor& op, const Node& node) const {
  for (const auto& [attribute, uid] : node.ports) op.set_descriptor(attribute, tensor(uid));
}

namespace {

// The operation of a node of each kind, its attribute descriptor (kept alive by
// the BuiltGraph) filled and finalized here.
Descriptor conv_operation(const Node& n, Descriptor& conv) {
  std::span<const int64_t> p(n.params);
  const size_t d = p.size() / 4;
  conv.set_data_type(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, n.compute)
      .set_enum(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set_int64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, static_cast<int64_t>(d))
      .set_int64s(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, p.subspan(0, d))
      .set_int64s(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, p.subspan(d, d))
      .set_int64s(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, p.subspan(2 * d, d))
      .set_int64s(CUDNN_ATTR_CONVOLUTION_DILATIONS, p.subspan(3 * d, d));
  conv.finalize();
  const ConvAttributes& a = kConvAttributes[static_cast<int>(n.kind)];
  Descriptor op(a.type);
  op.set_descriptor(a.conv, conv);
  set_scaling(op, a.alpha, a.beta, n.compute);
  return op;
}

Descriptor matmul_operation(const Node& n, Descriptor& desc) {
  desc.set_data_type(CUDNN_ATTR_MATMUL_COMP_TYPE, n.compute);
  desc.finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
  return op;
}

Descriptor pointwise_operation(const Node& n, Descriptor& desc) {
  // Runtime-fused pointwise engines compute in FLOAT whatever the tensors hold.
  desc.set_enum(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE,
                static_cast<cudnnPointwiseMode_t>(n.mode))
      .set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT);
  for (const PointwiseScalar& p : n.scalars) {
    LOOM_CHECK(pointwise_takes(n.mode, p.attribute), ValueError,
               "[cudnn graph] pointwise mode {} has no scalar attribute {} (given {}); leave it unset",
               pointwise_name(n.mode), static_cast<int>(p.attribute), p.value);
    desc.set_float(p.attribute, static_cast<float>(p.value));
  }
  desc.finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc);
  return op;
}

Descriptor reduction_operation(const Node& n, Descriptor& desc) {
  desc.set_enum(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
                static_cast<cudnnReduceTensorOp_t>(n.mode))
      .set_data_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set_bool(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, true);
  desc.finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc);
  return op;
}

Descriptor resample_operation(const Node& n, Descriptor& desc) {
  std::span<const int64_t> p(n.params);
  const size_t d = p.size() / 4;
  auto window = fractions(p.subspan(0, d)), stride = fractions(p.subspan(d, d));
  auto pre = fractions(p.subspan(2 * d, d)), post = fractions(p.subspan(3 * d, d));
  const auto mode = static_cast<cudnnResampleMode_t>(n.mode);
  const cudnnPaddingMode_t padding = mode == CUDNN_RESAMPLE_MAXPOOL ? CUDNN_NEG_INF_PAD : CUDNN_ZERO_PAD;
  const auto count = static_cast<int64_t>(d);
  desc.set_enum(CUDNN_ATTR_RESAMPLE_MODE, CUDNN_TYPE_RESAMPLE_MODE, mode)
      .set_data_type(CUDNN_ATTR_RESAMPLE_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set_int64(CUDNN_ATTR_RESAMPLE_SPATIAL_DIMS, count)
      .set(CUDNN_ATTR_RESAMPLE_WINDOW_DIMS, CUDNN_TYPE_FRACTION, count, window.data())
      .set(CUDNN_ATTR_RESAMPLE_STRIDES, CUDNN_TYPE_FRACTION, count, stride.data())
      .set(CUDNN_ATTR_RESAMPLE_PRE_PADDINGS, CUDNN_TYPE_FRACTION, count, pre.data())
      .set(CUDNN_ATTR_RESAMPLE_POST_PADDINGS, CUDNN_TYPE_FRACTION, count, post.data())
      .set_enum(CUDNN_ATTR_RESAMPLE_NAN_PROPAGATION, CUDNN_TYPE_NAN_PROPOGATION, CUDNN_PROPAGATE_NAN)
      .set_enum(CUDNN_ATTR_RESAMPLE_PADDING_MODE, CUDNN_TYPE_PADDING_MODE, padding);
  desc.finalize();
  const bool forward = n.kind == NodeKind::ResampleForward;
  Descriptor op(forward ? CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR
                        : CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR);
  op.set_descriptor(forward ? CUDNN_ATTR_OPERATION_RESAMPLE_FWD_DESC : CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DESC,
                    desc);
  // Resample alpha/beta are deprecated in 9.19 but cudnn-frontend still sets
  // them (as DOUBLE), so engines may still read them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  op.set_double(forward ? CUDNN_ATTR_OPERATION_RESAMPLE_FWD_ALPHA : CUDNN_ATTR_OPERATION_RESAMPLE_BWD_ALPHA, 1.0)
      .set_double(forward ? CUDNN_ATTR_OPERATION_RESAMPLE_FWD_BETA : CUDNN_ATTR_OPERATION_RESAMPLE_BWD_BETA, 0.0);
#pragma GCC diagnostic pop
  return op;
}

}  // namespace

void BuiltGraph::build(const Node& n) {
  std::optional<Descriptor> op;
  switch (n.kind) {
    case NodeKind::ConvForward:
    case NodeKind::ConvBackwardData:
    case NodeKind::ConvBackwardFilter:
      op.emplace(conv_operation(n, keep(Descriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR))));
      break;
    case NodeKind::Matmul:
      op.emplace(matmul_operation(n, keep(Descriptor(CUDNN_BACKEND_MATMUL_DESCRIPTOR))));
      break;
    case NodeKind::Pointwise:
      op.emplace(pointwise_operation(n, keep(Descriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR))));
      break;
    case NodeKind::Reduction:
      op.emplace(reduction_operation(n, keep(Descriptor(CUDNN_BACKEND_REDUCTION_DESCRIPTOR))));
      break;
    case NodeKind::NormForward:
      op.emplace(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
      op->set_enum(CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE,
                   static_cast<cudnnBackendNormMode_t>(n.mode))
          .set_enum(CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE,
                    static_cast<cudnnBackendNormFwdPhase_t>(n.phase));
      break;
    case NodeKind::NormBackward:
      op.emplace(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
      op->set_enum(CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE,
                   static_cast<cudnnBackendNormMode_t>(n.mode));
      break;
    case NodeKind::GenStats:
      op.emplace(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
      op->set_enum(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE,
                   static_cast<cudnnGenStatsMode_t>(n.mode))
          .set_data_type(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_DATA_FLOAT);
      break;
    case NodeKind::BnFinalize:
      op.emplace(CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR);
      op->set_enum(CUDNN_ATTR_OPERATION_BN_FINALIZE_STATS_MODE, CUDNN_TYPE_BN_FINALIZE_STATS_MODE,
                   static_cast<cudnnBnFinalizeStatsMode_t>(n.mode))
          .set_data_type(CUDNN_ATTR_OPERATION_BN_FINALIZE_MATH_PREC, CUDNN_DATA_FLOAT);
      break;
    case NodeKind::BnBackwardWeights:
      op.emplace(CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
      op->set_data_type(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_DATA_FLOAT);
      break;
    case NodeKind::ResampleForward:
    case NodeKind::ResampleBackward:
      op.emplace(resample_operation(n, keep(Descriptor(CUDNN_BACKEND_RESAMPLE_DESCRIPTOR))));
      break;
  }
  bind_ports(*op, n);
  op->finalize();
  operations_.push_back(std::move(*op));
}

}  // namespace loom::cudnn
