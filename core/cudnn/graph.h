// File: core/cudnn/graph.h
// An operation graph for cuDNN's backend API, described as data: tensors
// named by UIDs and the nodes between them. A Graph is cheap to build and copy
// (no cuDNN calls), so every op describes its graph on every call; the plan
// cache keys on the graph's canonical form (plan_cache.h) and only a miss turns
// the description into descriptors (BuiltGraph).
//
// Dims are always logical (N, C, H, W); the layout is only in the strides, and
// filters are (K, C/groups, R, S): cuDNN infers groups from C / filter C.
//
//   Graph g;
//   g.add_tensor(x_spec); g.add_tensor(w_spec); g.add_tensor(y_spec);
//   g.conv(ConvDirection::Forward, kX, kW, kY, conv_params, CUDNN_DATA_FLOAT);
//   run_plan(g, {{kX, x}, {kW, w}, {kY, y}}, "the tier below");   // plan_cache.h
#pragma once

#include <array>
#include <deque>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/cudnn/backend.h"
#include "core/kernel/conv.h"
#include "core/kernel/pool.h"

namespace loom::cudnn {

// The most BYTE_ALIGNMENT ever promises: cuDNN's engines vectorize to 16 bytes
// at most, and a larger promise would only split plan keys further.
constexpr int64_t kFullAlignment = 16;

struct TensorSpec {
  int64_t uid = 0;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  int64_t alignment = kFullAlignment;  // bytes; must hold for every pointer bound at execute
  bool is_virtual = false;
  bool by_value = false;          // a host scalar passed through the variant pack
  double scalar_for_testing = 0;  // by-value value used when test-executing a plan
};

// The order indexes the attribute table in graph.cc.
enum class ConvDirection { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

// A scalar attribute of a pointwise descriptor, set where cuDNN's default is
// not wanted: ReLU's lower clip slope and its lower and upper clip, ELU's
// alpha, softplus's and swish's beta.
struct PointwiseScalar {
  cudnnBackendAttributeName_t attribute;
  double value;
  bool operator==(const PointwiseScalar&) const = default;
};
using PointwiseScalars = std::vector<PointwiseScalar>;

// One cuDNN operation. `ports` binds the operation's tensor attributes to
// UIDs; `mode` is the pointwise mode, reduction operator, norm mode or
// resample mode; `scalars` the pointwise mode's attributes (none: cuDNN's
// defaults); `params` the geometry.
enum class NodeKind : uint8_t {
  ConvForward,  // same order as ConvDirection
  ConvBackwardData,
  ConvBackwardFilter,
  Matmul,
  Pointwise,
  Reduction,
  NormForward,
  NormBackward,
  ResampleForward,
  ResampleBackward,
  GenStats,           // per-channel sum and sum of squares (a conv's epilogue)
  BnFinalize,         // batch-norm statistics from those sums: equivalent scale and bias
  BnBackwardWeights,  // dscale, dbias and the equivalent dx coefficients
};

struct Node {
  NodeKind kind = NodeKind::Pointwise;
  int64_t mode = 0;
  int64_t phase = 0;  // NormForward: cudnnNormFwdPhase_t
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  PointwiseScalars scalars;
  std::vector<std::pair<cudnnBackendAttributeName_t, int64_t>> ports;
  std::vector<int64_t> params;
};

class Graph {
 public:
  void add_tensor(const TensorSpec& spec);

  // Forward: (x, w) -> y; BackwardData: (dy, w) -> dx; BackwardFilter: (x, dy) -> dw.
  // The three UIDs are always given as (x or dx, w or dw, y or dy).
  // The geometry is the one every conv kernel takes (core/kernel/conv.h); padding is symmetric.
  // Where one of the three is channels-last only, those added so far that are dense in
  // both layouts are described as channels-last too (one_layout in graph.cc says why).
  void conv(ConvDirection direction, int64_t x, int64_t w, int64_t y, const kernel::ConvParams& geometry,
            cudnnDataType_t compute);
  void matmul(int64_t a, int64_t b, int64_t c, cudnnDataType_t compute);
  // y = mode(x) or y = mode(x, b); `scalars` as in Node.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, std::optional<int64_t> b, int64_t y,
                 PointwiseScalars scalars = {});
  // dx = mode(dy, x) for the *_BWD modes (e.g. CUDNN_POINTWISE_RELU_BWD).
  void pointwise_backward(cudnnPointwiseMode_t mode, int64_t dy, int64_t x, int64_t dx,
                          PointwiseScalars scalars = {});
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);

  // One builder for every normalization node: `mode` is cuDNN's norm mode
  // (CUDNN_BATCH_NORM, CUDNN_LAYER_NORM, CUDNN_INSTANCE_NORM, CUDNN_GROUP_NORM,
  // ...), which fixes the dims the statistics reduce over through the tensors'
  // shapes (batch: (1, C, 1, 1) statistics; layer: (N, 1, 1, 1)).
  //   Train:    NORM_FORWARD, training phase: x, scale, bias, epsilon [, momentum,
  //             in/out running mean and var] -> y, mean, inv_variance.
  //   Eval:     NORM_FORWARD, inference phase: y = (x - mean) * inv_variance * scale
  //             + bias. No engine runs it alone in 9.19; it recomputes a backward's
  //             input inside a fusion.
  //   Backward: NORM_BACKWARD: x, dy, scale, mean, inv_variance -> dx, dscale, dbias.
  // Ports left unset are not bound; ValueError for a port the phase does not take.
  enum class NormPhase : uint8_t { Train, Eval, Backward };
  struct NormPorts {
    std::optional<int64_t> x{}, scale{}, bias{}, epsilon{}, momentum{}, in_running_mean{}, in_running_var{};
    std::optional<int64_t> y{}, mean{}, inv_variance{}, out_running_mean{}, out_running_var{};
    std::optional<int64_t> dy{}, dx{}, dscale{}, dbias{};
  };
  void norm(cudnnBackendNormMode_t mode, NormPhase phase, const NormPorts& ports);

  // The batch-norm building blocks of a conv-BN fusion (cuDNN's ConvBNfprop,
  // DgradDreluBNBwdWeight patterns). sum and sqsum (1, C, 1, 1) float.
  void gen_stats(int64_t x, int64_t sum, int64_t sqsum);
  // From the sums over `accum_count` elements per channel (by value, int64):
  // eq_scale = scale * inv_std and eq_bias = bias - mean * eq_scale, so that
  // bn(y) = y * eq_scale + eq_bias; the saved and the updated running statistics.
  struct BnFinalize {
    int64_t sum, sqsum, scale, bias, prev_running_mean, prev_running_var;
    int64_t epsilon, momentum, accum_count;  // by value
    int64_t eq_scale, eq_bias, saved_mean, saved_inv_std, running_mean, running_var;
  };
  void bn_finalize(const BnFinalize& uids);
  // With dy the gradient at the norm's output and x its input: dscale, dbias,
  // and dx = eq_dy_scale * dy + eq_x_scale * x + eq_bias (all (1, C, 1, 1) float).
  struct BnBackwardWeights {
    int64_t x, dy, mean, inv_std, scale;
    int64_t dscale, dbias, eq_dy_scale, eq_x_scale, eq_bias;
  };
  void bn_backward_weights(const BnBackwardWeights& uids);

  // A pooling as a resample node: cuDNN pads both sides explicitly, so
  // post_padding (rows, columns) is whatever makes the output size right.
  void resample_forward(const kernel::Pool2dParams& pool, std::array<int64_t, 2> post_padding, int64_t x,
                        int64_t y, std::optional<int64_t> index);
  struct ResampleBackward {
    int64_t dy, dx;
    std::optional<int64_t> x, y, index;
  };
  void resample_backward(const kernel::Pool2dParams& pool, std::array<int64_t, 2> post_padding,
                         const ResampleBackward& uids);

  // Built for any sizes of its structure (cuDNN's dynamic shapes), so that a
  // plan made from it can bind a kernel another size compiled (kernel_reuse.h).
  // How the graph is built, not what it computes: not part of the canonical form.
  void set_dynamic_shape(bool dynamic) { dynamic_shape_ = dynamic; }
  bool dynamic_shape() const { return dynamic_shape_; }

  const std::vector<TensorSpec>& tensors() const { return specs_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  bool has_node(NodeKind kind) const;

  // Every tensor and node as numbers (UIDs, dims, strides with size-1 dims'
  // strides as 0, dtypes, alignments, modes, geometry): what the plan key holds.
  void append_canonical(std::vector<int64_t>& out) const;
  // "conv_fprop+add+relu_fwd x(8, 3, 32, 32) nhwc float w(...) ...": the
  // canonical form for people (the plan-cache listing, error messages).
  std::string pattern() const;

  // Throws ValueError unless each (uid, pointer) is at least as aligned as its
  // tensor's declared BYTE_ALIGNMENT: an engine built for the declaration
  // vectorizes to it, and a less aligned pointer is a sticky CUDA error
  // (cudaErrorMisalignedAddress) that loses the process. Cheap (a few
  // tensors); every execute of a plan runs it, so captured graphs are checked
  // when captured and their replays bind the same pointers.
  void check_alignment(const std::vector<std::pair<int64_t, const void*>>& pointers) const;

 private:
  void add_node(Node node) { nodes_.push_back(std::move(node)); }
  void one_layout(std::initializer_list<int64_t> uids);

  std::vector<TensorSpec> specs_;
  std::vector<Node> nodes_;
  bool dynamic_shape_ = false;
};

// A Graph turned into cuDNN descriptors: the tensors, the operations and the
// finalized OPERATIONGRAPH. It owns every descriptor it made, so a plan built
// from it stays valid as long as it lives (Plan keeps it). Throws CudnnError.
class BuiltGraph {
 public:
  BuiltGraph(Graph graph, cudnnHandle_t handle);
  BuiltGraph(BuiltGraph&&) = default;

  const Descriptor& operation_graph() const { return *operation_graph_; }
  const Graph& graph() const { return graph_; }

 private:
  const Descriptor& tensor(int64_t uid) const;
  Descriptor& keep(Descriptor descriptor);  // owns attribute descriptors (conv, pointwise, ...)
  void build(const Node& node);
  void bind_ports(Descriptor& op, const Node& node) const;

  Graph graph_;
  std::map<int64_t, Descriptor> tensors_;
  std::deque<Descriptor> attributes_;  // deque: references stay valid as it grows
  std::vector<Descriptor> operations_;
  std::optional<Descriptor> operation_graph_;
};

// Binds a descriptor (operation graph, execution plan) to a handle's device.
void set_handle(Descriptor& descriptor, cudnnBackendAttributeName_t name, cudnnHandle_t handle);

}  // namespace loom::cudnn
