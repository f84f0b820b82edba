// File: onnx/lowering.cc
// The op rows' context: value names, constants, batch-following shapes, nodes.
#include "onnx/lowering.h"

#include <fmt/format.h>

namespace loom::onnx {

Lowering::Lowering(proto::Graph& graph, std::string batch_source)
    : graph_(graph), batch_source_(std::move(batch_source)) {}

void Lowering::begin(const TracedOp& op, size_t index) {
  current_ = &op;
  index_ = index;
}

void Lowering::fail(const std::string& why) const {
  const trace::Op& o = op();
  throw ExportError(fmt::format("[onnx] op '{}' (#{} of the trace{}): {}", o.name, index_,
                                o.module.empty() ? "" : ", in module '" + o.module + "'", why));
}

std::vector<SymInt> Lowering::sym_ints(std::string_view attribute) const {
  const std::vector<int64_t>& values = op().get_ints(attribute);
  auto it = current_->symbolic.find(std::string(attribute));
  if (it != current_->symbolic.end()) return it->second;
  std::vector<SymInt> out;
  for (int64_t v : values) out.push_back({0, v});
  return out;
}

SymInt Lowering::sym_int(std::string_view attribute) const {
  const int64_t value = op().get_int(attribute);
  auto it = current_->symbolic.find(std::string(attribute));
  return it != current_->symbolic.end() ? it->second.at(0) : SymInt{0, value};
}

bool Lowering::known(const Tensor& t) const { return names_.count(t.impl()) > 0; }

const std::string& Lowering::name_of(const Tensor& t) const {
  auto it = names_.find(t.impl());
  if (it == names_.end()) fail(fmt::format("an input of shape {} comes from nowhere the trace saw", shape_str(t.sizes())));
  return it->second;
}

void Lowering::bind(const Tensor& t, const std::string& name) { names_[t.impl()] = name; }

std::string Lowering::add_initializer(const std::string& name, const Tensor& value) {
  graph_.initializers.push_back({name, value});
  return name;
}

std::string Lowering::fresh(std::string_view hint) {
  const std::string module = current_ != nullptr ? op().module : "";
  const std::string base = module.empty() ? std::string(hint) : module + "/" + std::string(hint);
  return fmt::format("{}_{}", base, counters_[base]++);
}

std::string Lowering::ints(const std::vector<int64_t>& values) {
  return tensor_constant(from_host(values.data(), DType::Int64, {static_cast<int64_t>(values.size())},
                                   {.dtype = DType::Int64}),
                         "ints");
}

std::string Lowering::scalar(double value, DType dtype) {
  return tensor_constant(full({}, value, {.dtype = dtype}), "scalar");
}

std::string Lowering::tensor_constant(const Tensor& value, std::string_view hint) {
  const std::string name = fresh(hint);
  emit_n("Constant", {}, 1, {{"value", proto::TensorValue{name + "_value", value.cpu().contiguous()}}});
  // emit_n named the output itself: rename it to `name` for readable graphs.
  graph_.nodes.back().outputs[0] = name;
  return name;
}

std::string Lowering::batch_size() {
  if (batch_size_.empty()) {
    LOOM_CHECK(!batch_source_.empty(), ExportError,
               "[onnx] a shape follows the batch size, but the export has a fixed batch (internal error)");
    batch_size_ = emit("Shape", {batch_source_}, {{"start", int64_t{0}}, {"end", int64_t{1}}});
  }
  return batch_size_;
}

std::string Lowering::shape(const std::vector<SymInt>& dims) {
  bool symbolic = false;
  for (const SymInt& d : dims) symbolic = symbolic || d.symbolic();
  std::vector<int64_t> fixed;
  for (const SymInt& d : dims) fixed.push_back(d.b);
  if (!symbolic) return ints(fixed);
  // Runs of constants stay one constant; each batch-following dim is a * N + b.
  std::vector<std::string> parts;
  std::vector<int64_t> run;
  for (const SymInt& d : dims) {
    if (!d.symbolic()) {
      run.push_back(d.b);
      continue;
    }
    if (!run.empty()) parts.push_back(ints(run));
    run.clear();
    std::string n = batch_size();
    if (d.a != 1) n = emit("Mul", {n, ints({d.a})});
    if (d.b != 0) n = emit("Add", {n, ints({d.b})});
    parts.push_back(n);
  }
  if (!run.empty()) parts.push_back(ints(run));
  return parts.size() == 1 ? parts[0] : emit("Concat", parts, {{"axis", int64_t{0}}});
}

std::vector<std::string> Lowering::emit_n(const std::string& op_type, std::vector<std::string> inputs, int outputs,
                                          std::vector<proto::Attribute> attributes) {
  proto::Node node{.op_type = op_type, .inputs = std::move(inputs), .outputs = {}, .name = fresh(op_type),
                   .attributes = std::move(attributes)};
  for (int i = 0; i < outputs; ++i) node.outputs.push_back(outputs == 1 ? node.name : fmt::format("{}:{}", node.name, i));
  graph_.nodes.push_back(std::move(node));
  return graph_.nodes.back().outputs;
}

}  // namespace loom::onnx
