// File: onnx/lowering.h
// What the op rows (lower_ops.cc) build ONNX nodes with: the names of traced
// tensors, constants, shapes that follow the batch size, and the op being
// lowered. Private to onnx/.
//
// N batch.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/trace.h"
#include "onnx/export.h"
#include "onnx/proto.h"

namespace loom::onnx {

// An integer attribute as a function of the batch size: a * N + b (a = 0: a constant).
struct SymInt {
  int64_t a = 0;
  int64_t b = 0;
  bool symbolic() const { return a != 0; }
};

// A traced op with the attributes that follow the batch size (element by element).
struct TracedOp {
  trace::Op op;
  std::map<std::string, std::vector<SymInt>> symbolic;
};

class Lowering {
 public:
  // `batch_source`: the graph input whose dim 0 is the batch (dynamic export), or "".
  Lowering(proto::Graph& graph, std::string batch_source);

  // --- the op being lowered ----------------------------------------------------
  void begin(const TracedOp& op, size_t index);
  const trace::Op& op() const { return current_->op; }
  // An integer list attribute, each element a constant or a * N + b.
  std::vector<SymInt> sym_ints(std::string_view attribute) const;
  SymInt sym_int(std::string_view attribute) const;
  // ExportError "[onnx] op 'name' (#k, in module 'm'): `why`".
  [[noreturn]] void fail(const std::string& why) const;

  // --- values --------------------------------------------------------------------
  bool known(const Tensor& t) const;
  const std::string& name_of(const Tensor& t) const;  // fails for a tensor no row or input made
  void bind(const Tensor& t, const std::string& name);
  std::string add_initializer(const std::string& name, const Tensor& value);
  std::string fresh(std::string_view hint);  // a new value name, "<module>/<hint>_k"

  // --- constants -----------------------------------------------------------------
  std::string ints(const std::vector<int64_t>& values);  // int64 (k)
  std::string scalar(double value, DType dtype);          // a 0-d constant
  std::string tensor_constant(const Tensor& value, std::string_view hint);
  // int64 (k) of the dims: a constant, or computed from the batch input's
  // shape where an element follows the batch size.
  std::string shape(const std::vector<SymInt>& dims);

  // --- nodes ---------------------------------------------------------------------
  // Adds a node and returns its outputs' names (fresh, named after op_type).
  std::vector<std::string> emit_n(const std::string& op_type, std::vector<std::string> inputs, int outputs,
                                  std::vector<proto::Attribute> attributes = {});
  std::string emit(const std::string& op_type, std::vector<std::string> inputs,
                   std::vector<proto::Attribute> attributes = {}) {
    return emit_n(op_type, std::move(inputs), 1, std::move(attributes))[0];
  }

 private:
  std::string batch_size();  // int64 (1): the batch input's dim 0

  proto::Graph& graph_;
  std::string batch_source_, batch_size_;
  const TracedOp* current_ = nullptr;
  size_t index_ = 0;
  std::unordered_map<const TensorImpl*, std::string> names_;
  std::map<std::string, int> counters_;
};

// Lowers one traced op: its row's nodes, its outputs bound. ExportError for an
// op without a row.
void lower_op(Lowering& lowering, const TracedOp& op, size_t index);

}  // namespace loom::onnx
