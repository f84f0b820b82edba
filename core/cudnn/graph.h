// File: core/cudnn/graph.h
// An operation graph for cuDNN's backend API: tensors named by UIDs, the
// operations between them, and the finalized OPERATIONGRAPH descriptor. A Graph
// owns every descriptor it made, so a plan built from it stays valid as long as
// the Graph lives (PlanCache keeps them together).
//
// Dims are always logical (N, C, H, W); the layout is only in the strides, and
// filters are (K, C/groups, R, S): cuDNN infers groups from C / filter C.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/cudnn/backend.h"

namespace loom::cudnn {

struct TensorSpec {
  int64_t uid = 0;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  int64_t alignment = 16;  // bytes; must hold for the real pointer at execute
  bool is_virtual = false;
  bool by_value = false;          // a host scalar passed through the variant pack
  double scalar_for_testing = 0;  // by-value value used when test-executing a plan
};

struct ConvGeometry {
  std::vector<int64_t> stride, pre_padding, post_padding, dilation;  // 2 each (H, W)
};

// The order indexes the attribute table in graph.cc.
enum class ConvDirection { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

struct PoolGeometry {
  cudnnResampleMode_t mode = CUDNN_RESAMPLE_MAXPOOL;
  std::vector<int64_t> window, stride, pre_padding, post_padding;
};

class Graph {
 public:
  explicit Graph(std::string name) : name_(std::move(name)) {}
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  void add_tensor(const TensorSpec& spec);

  // Forward: (x, w) -> y; BackwardData: (dy, w) -> dx; BackwardFilter: (x, dy) -> dw.
  // The three UIDs are always given as (x or dx, w or dw, y or dy).
  void conv(ConvDirection direction, int64_t x, int64_t w, int64_t y, const ConvGeometry& geometry,
            cudnnDataType_t compute);
  void matmul(int64_t a, int64_t b, int64_t c, cudnnDataType_t compute);
  // y = mode(x) or y = mode(x, b).
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, std::optional<int64_t> b, int64_t y);
  // dx = mode(dy, x) for the *_BWD modes (e.g. CUDNN_POINTWISE_RELU_BWD).
  void pointwise_backward(cudnnPointwiseMode_t mode, int64_t dy, int64_t x, int64_t dx);
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);

  struct BatchNormForward {
    int64_t x, scale, bias, epsilon, momentum, in_running_mean, in_running_var;
    int64_t y, mean, inv_variance, out_running_mean, out_running_var;
  };
  void batch_norm_forward(const BatchNormForward& uids);
  struct BatchNormBackward {
    int64_t x, dy, scale, mean, inv_variance;
    int64_t dx, dscale, dbias;
  };
  void batch_norm_backward(const BatchNormBackward& uids);
  // NORM_FORWARD in the inference phase: y = (x - mean) * inv_variance * scale + bias.
  // No engine runs it alone in 9.19; it recomputes a backward's input inside a fusion.
  struct BatchNormInference {
    int64_t x, mean, inv_variance, scale, bias, y;
  };
  void batch_norm_inference(const BatchNormInference& uids);

  void resample_forward(const PoolGeometry& geometry, int64_t x, int64_t y, std::optional<int64_t> index);
  struct ResampleBackward {
    int64_t dy, dx;
    std::optional<int64_t> x, y, index;
  };
  void resample_backward(const PoolGeometry& geometry, const ResampleBackward& uids);

  // Builds the OPERATIONGRAPH from every op added so far; throws CudnnError.
  void finalize(cudnnHandle_t handle);

  const Descriptor& operation_graph() const { return *operation_graph_; }
  const std::vector<TensorSpec>& tensors() const { return specs_; }
  const std::string& name() const { return name_; }
  bool has_operation(cudnnBackendDescriptorType_t type) const;

 private:
  const Descriptor& tensor(int64_t uid) const;
  Descriptor& keep(Descriptor descriptor);  // owns attribute descriptors (conv, pointwise, ...)
  Descriptor resample_descriptor(const PoolGeometry& geometry);
  const Descriptor& pointwise_descriptor(cudnnPointwiseMode_t mode);
  void add_operation(Descriptor op);  // finalizes it and keeps it for the operation graph

  std::string name_;
  std::vector<TensorSpec> specs_;
  std::map<int64_t, Descriptor> tensors_;
  std::deque<Descriptor> attributes_;  // deque: references stay valid as it grows
  std::vector<Descriptor> operations_;
  std::optional<Descriptor> operation_graph_;
};

// Binds a descriptor (operation graph, execution plan) to a handle's device.
void set_handle(Descriptor& descriptor, cudnnBackendAttributeName_t name, cudnnHandle_t handle);

}  // namespace loom::cudnn
