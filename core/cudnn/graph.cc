#include "core/cudnn/graph.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace loom::cudnn {

namespace {

using Fraction = cudnnFraction_t;

std::vector<Fraction> fractions(const std::vector<int64_t>& values) {
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

// Resample alpha/beta are deprecated in 9.19 but cudnn-frontend still sets them
// (as DOUBLE), so engines may still read them.
void set_resample_scaling(Descriptor& op, cudnnBackendAttributeName_t alpha,
                          cudnnBackendAttributeName_t beta) {
  op.set_double(alpha, 1.0).set_double(beta, 0.0);
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

void Graph::add_tensor(const TensorSpec& spec) {
  LOOM_CHECK(!tensors_.contains(spec.uid), ValueError, "[cudnn graph {}] tensor uid {} added twice",
             name_, spec.uid);
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
  specs_.push_back(spec);
}

const Descriptor& Graph::tensor(int64_t uid) const {
  auto it = tensors_.find(uid);
  LOOM_CHECK(it != tensors_.end(), ValueError, "[cudnn graph {}] no tensor with uid {}", name_, uid);
  return it->second;
}

Descriptor& Graph::keep(Descriptor descriptor) {
  attributes_.push_back(std::move(descriptor));
  return attributes_.back();
}

void Graph::conv(ConvDirection direction, int64_t x, int64_t w, int64_t y,
                 const ConvGeometry& g, cudnnDataType_t compute) {
  Descriptor& conv = keep(Descriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  conv.set_data_type(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, compute)
      .set_enum(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set_int64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, static_cast<int64_t>(g.stride.size()))
      .set_int64s(CUDNN_ATTR_CONVOLUTION_DILATIONS, g.dilation)
      .set_int64s(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, g.stride)
      .set_int64s(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, g.pre_padding)
      .set_int64s(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, g.post_padding);
  conv.finalize();
  // The three directions are one operation with different attribute names.
  struct ConvAttributes {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  };
  static const ConvAttributes kAttributes[] = {
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
  const ConvAttributes& a = kAttributes[static_cast<int>(direction)];
  Descriptor op(a.type);
  op.set_descriptor(a.x, tensor(x))
      .set_descriptor(a.w, tensor(w))
      .set_descriptor(a.y, tensor(y))
      .set_descriptor(a.conv, conv);
  set_scaling(op, a.alpha, a.beta, compute);
  add_operation(std::move(op));
}

void Graph::matmul(int64_t a, int64_t b, int64_t c, cudnnDataType_t compute) {
  Descriptor& desc = keep(Descriptor(CUDNN_BACKEND_MATMUL_DESCRIPTOR));
  desc.set_data_type(CUDNN_ATTR_MATMUL_COMP_TYPE, compute);
  desc.finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensor(a))
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensor(b))
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensor(c))
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
  add_operation(std::move(op));
}

bool Graph::has_operation(cudnnBackendDescriptorType_t type) const {
  return std::any_of(operations_.begin(), operations_.end(),
                     [type](const Descriptor& op) { return op.type() == type; });
}

void Graph::add_operation(Descriptor op) {
  op.finalize();
  operations_.push_back(std::move(op));
}

// Runtime-fused pointwise engines compute in FLOAT whatever the tensors hold.
const Descriptor& Graph::pointwise_descriptor(cudnnPointwiseMode_t mode) {
  Descriptor& desc = keep(Descriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  desc.set_enum(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
      .set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT);
  desc.finalize();
  return desc;
}

void Graph::pointwise(cudnnPointwiseMode_t mode, int64_t x, std::optional<int64_t> b, int64_t y) {
  const Descriptor& desc = pointwise_descriptor(mode);
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc)
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensor(x))
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensor(y));
  if (b) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensor(*b));
  add_operation(std::move(op));
}

void Graph::pointwise_backward(cudnnPointwiseMode_t mode, int64_t dy, int64_t x, int64_t dx) {
  const Descriptor& desc = pointwise_descriptor(mode);
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc)
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, tensor(dy))
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensor(x))
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, tensor(dx));
  add_operation(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t op_type, int64_t x, int64_t y) {
  Descriptor& desc = keep(Descriptor(CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
  desc.set_enum(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, op_type)
      .set_data_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set_bool(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, true);
  desc.finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensor(x))
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensor(y))
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc);
  add_operation(std::move(op));
}

void Graph::batch_norm_forward(const BatchNormForward& u) {
  Descriptor op(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
  op.set_enum(CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, CUDNN_BATCH_NORM)
      .set_enum(CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, CUDNN_NORM_FWD_TRAINING)
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, tensor(u.x))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, tensor(u.scale))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, tensor(u.bias))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, tensor(u.epsilon))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, tensor(u.momentum))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, tensor(u.in_running_mean))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, tensor(u.in_running_var))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, tensor(u.y))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, tensor(u.mean))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, tensor(u.inv_variance))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, tensor(u.out_running_mean))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, tensor(u.out_running_var));
  add_operation(std::move(op));
}

void Graph::batch_norm_backward(const BatchNormBackward& u) {
  Descriptor op(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
  op.set_enum(CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE, CUDNN_BATCH_NORM)
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, tensor(u.x))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, tensor(u.dy))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, tensor(u.scale))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, tensor(u.mean))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, tensor(u.inv_variance))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, tensor(u.dx))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, tensor(u.dscale))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, tensor(u.dbias));
  add_operation(std::move(op));
}

void Graph::batch_norm_inference(const BatchNormInference& u) {
  Descriptor op(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
  op.set_enum(CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, CUDNN_BATCH_NORM)
      .set_enum(CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, CUDNN_NORM_FWD_INFERENCE)
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, tensor(u.x))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, tensor(u.mean))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, tensor(u.inv_variance))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, tensor(u.scale))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, tensor(u.bias))
      .set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, tensor(u.y));
  add_operation(std::move(op));
}

Descriptor Graph::resample_descriptor(const PoolGeometry& g) {
  Descriptor desc(CUDNN_BACKEND_RESAMPLE_DESCRIPTOR);
  auto window = fractions(g.window), stride = fractions(g.stride);
  auto pre = fractions(g.pre_padding), post = fractions(g.post_padding);
  auto count = static_cast<int64_t>(window.size());
  cudnnPaddingMode_t padding = g.mode == CUDNN_RESAMPLE_MAXPOOL ? CUDNN_NEG_INF_PAD : CUDNN_ZERO_PAD;
  desc.set_enum(CUDNN_ATTR_RESAMPLE_MODE, CUDNN_TYPE_RESAMPLE_MODE, g.mode)
      .set_data_type(CUDNN_ATTR_RESAMPLE_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set_int64(CUDNN_ATTR_RESAMPLE_SPATIAL_DIMS, count)
      .set(CUDNN_ATTR_RESAMPLE_WINDOW_DIMS, CUDNN_TYPE_FRACTION, count, window.data())
      .set(CUDNN_ATTR_RESAMPLE_STRIDES, CUDNN_TYPE_FRACTION, count, stride.data())
      .set(CUDNN_ATTR_RESAMPLE_PRE_PADDINGS, CUDNN_TYPE_FRACTION, count, pre.data())
      .set(CUDNN_ATTR_RESAMPLE_POST_PADDINGS, CUDNN_TYPE_FRACTION, count, post.data())
      .set_enum(CUDNN_ATTR_RESAMPLE_NAN_PROPAGATION, CUDNN_TYPE_NAN_PROPOGATION, CUDNN_PROPAGATE_NAN)
      .set_enum(CUDNN_ATTR_RESAMPLE_PADDING_MODE, CUDNN_TYPE_PADDING_MODE, padding);
  desc.finalize();
  return desc;
}

void Graph::resample_forward(const PoolGeometry& geometry, int64_t x, int64_t y,
                             std::optional<int64_t> index) {
  Descriptor& desc = keep(resample_descriptor(geometry));
  Descriptor op(CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_FWD_DESC, desc)
      .set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_FWD_XDESC, tensor(x))
      .set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_FWD_YDESC, tensor(y));
  if (index) op.set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_FWD_IDXDESC, tensor(*index));
  set_resample_scaling(op, CUDNN_ATTR_OPERATION_RESAMPLE_FWD_ALPHA, CUDNN_ATTR_OPERATION_RESAMPLE_FWD_BETA);
  add_operation(std::move(op));
}

void Graph::resample_backward(const PoolGeometry& geometry, const ResampleBackward& u) {
  Descriptor& desc = keep(resample_descriptor(geometry));
  Descriptor op(CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DESC, desc)
      .set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DYDESC, tensor(u.dy))
      .set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DXDESC, tensor(u.dx));
  if (u.x) op.set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_BWD_XDESC, tensor(*u.x));
  if (u.y) op.set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_BWD_YDESC, tensor(*u.y));
  if (u.index) op.set_descriptor(CUDNN_ATTR_OPERATION_RESAMPLE_BWD_IDXDESC, tensor(*u.index));
  set_resample_scaling(op, CUDNN_ATTR_OPERATION_RESAMPLE_BWD_ALPHA, CUDNN_ATTR_OPERATION_RESAMPLE_BWD_BETA);
  add_operation(std::move(op));
}

void Graph::finalize(cudnnHandle_t handle) {
  std::vector<const Descriptor*> ops;
  for (const Descriptor& op : operations_) ops.push_back(&op);
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set_descriptors(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops);
  set_handle(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle);
  graph.finalize();
  operation_graph_ = std::move(graph);
}

}  // namespace loom::cudnn
