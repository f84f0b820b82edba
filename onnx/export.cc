// File: onnx/export.cc
// Two traced runs of the forward, their comparison (which integers follow the
// batch size, which tensors are constants), batch-norm folding, lowering and
// the atomic write.
//
// N batch, K out channels.
#include "onnx/export.h"

#include <fmt/format.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/atomic_file.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/ops.h"
#include "onnx/lowering.h"

namespace loom::onnx {

namespace {

struct Run {
  std::vector<Tensor> inputs, outputs;
  std::vector<trace::Op> ops;
};

// The forward once, traced, in evaluation mode with autocast and fusion off
// (a fused block then runs its steps as public ops, which the trace sees).
Run traced_run(const Forward& forward, std::vector<Tensor> inputs) {
  Run run{std::move(inputs), {}, {}};
  trace::Recorder recorder;
  run.outputs = forward(run.inputs);
  run.ops = recorder.ops();
  return run;
}

// Inputs with other values (floating ones scaled and shifted) and, for a
// dynamic batch, their first sample once more at the end.
std::vector<Tensor> other_inputs(const std::vector<Tensor>& inputs, bool one_more) {
  std::vector<Tensor> out;
  for (const Tensor& x : inputs) {
    Tensor y = one_more ? cat({x, x.narrow(0, 0, 1)}, 0) : x.clone();
    if (is_floating(y.dtype())) y = add(mul(y, 0.75), 0.5);
    out.push_back(y);
  }
  return out;
}

// Where an op's input comes from, to compare the two runs slot by slot.
struct Sources {
  std::unordered_map<const TensorImpl*, std::string> named;  // inputs, parameters, buffers, op outputs
  std::string of(const Tensor& t) const {
    if (!t.defined()) return "-";
    auto it = named.find(t.impl());
    return it != named.end() ? it->second : "constant";
  }
};

Sources sources(const Run& run, const nn::Module& module) {
  Sources s;
  for (const auto& [name, t] : module.named_parameters()) s.named[t.impl()] = "parameter " + name;
  for (const auto& [name, t] : module.named_buffers()) s.named[t.impl()] = "buffer " + name;
  for (size_t i = 0; i < run.inputs.size(); ++i) s.named[run.inputs[i].impl()] = fmt::format("input {}", i);
  for (size_t k = 0; k < run.ops.size(); ++k) {
    for (size_t j = 0; j < run.ops[k].outputs.size(); ++j) {
      s.named[run.ops[k].outputs[j].impl()] = fmt::format("output {} of op #{}", j, k);
    }
  }
  return s;
}

[[noreturn]] void differ(const trace::Op& op, size_t k, const std::string& what) {
  throw ExportError(fmt::format(
      "[onnx] the forward ran differently on two inputs at op '{}' (#{} of the trace{}): {}; ONNX needs one "
      "graph for every input (control flow on tensor values, or a tensor made by an op the trace does not "
      "record, has none)",
      op.name, k, op.module.empty() ? "" : ", in module '" + op.module + "'", what));
}

// Integer attributes that differ between the runs follow the batch size n_a -> n_a + 1.
void compare_attributes(TracedOp& traced, const trace::Op& b, size_t k, std::optional<int64_t> batch) {
  const trace::Op& a = traced.op;
  for (size_t i = 0; i < a.attributes.size(); ++i) {
    const trace::Value &va = a.attributes[i].value, &vb = b.attributes.at(i).value;
    if (va == vb) continue;
    const std::string& name = a.attributes[i].name;
    const auto* ia = std::get_if<int64_t>(&va);
    const auto* la = std::get_if<std::vector<int64_t>>(&va);
    if (!batch || (ia == nullptr && la == nullptr) || va.index() != vb.index()) {
      differ(a, k, fmt::format("its attribute '{}' changed", name));
    }
    std::vector<int64_t> xs = la ? *la : std::vector<int64_t>{*ia};
    std::vector<int64_t> ys = la ? std::get<std::vector<int64_t>>(vb) : std::vector<int64_t>{std::get<int64_t>(vb)};
    if (xs.size() != ys.size()) differ(a, k, fmt::format("its attribute '{}' changed length", name));
    std::vector<SymInt> sym;
    for (size_t j = 0; j < xs.size(); ++j) {
      const int64_t per_sample = ys[j] - xs[j];
      sym.push_back({per_sample, xs[j] - per_sample * *batch});
    }
    traced.symbolic[name] = sym;
  }
}

// Constants (tensors no traced op or input made) must be the same in both runs.
void compare_inputs(const trace::Op& a, const trace::Op& b, size_t k, const Sources& sa, const Sources& sb) {
  if (a.inputs.size() != b.inputs.size()) differ(a, k, "it took a different number of inputs");
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const std::string from_a = sa.of(a.inputs[i]), from_b = sb.of(b.inputs[i]);
    if (from_a != from_b) differ(a, k, fmt::format("its input {} came from {}, then from {}", i, from_a, from_b));
    if (from_a != "constant") continue;
    const Tensor &x = a.inputs[i], &y = b.inputs[i];
    if (x.sizes() != y.sizes() || x.dtype() != y.dtype()) {
      differ(a, k, fmt::format("its input {}, a tensor the trace saw no op make, changed shape from {} to {}", i,
                               shape_str(x.sizes()), shape_str(y.sizes())));
    }
    if (!equal(x.cpu(), y.cpu())) {
      differ(a, k, fmt::format("its input {} ({}), a tensor the trace saw no op make, took other values", i,
                               shape_str(x.sizes())));
    }
  }
}

std::vector<TracedOp> compare_runs(const Run& a, const Run& b, const nn::Module& module,
                                   std::optional<int64_t> batch) {
  if (a.ops.size() != b.ops.size()) {
    throw ExportError(fmt::format("[onnx] the forward ran {} ops on the example inputs and {} on others; ONNX needs "
                                  "one graph for every input (control flow on tensor values has none)",
                                  a.ops.size(), b.ops.size()));
  }
  const Sources sa = sources(a, module), sb = sources(b, module);
  std::vector<TracedOp> traced;
  for (size_t k = 0; k < a.ops.size(); ++k) {
    const trace::Op &x = a.ops[k], &y = b.ops[k];
    if (x.name != y.name) differ(x, k, fmt::format("the other run had '{}' there", y.name));
    if (x.attributes.size() != y.attributes.size()) differ(x, k, "its attributes changed");
    compare_inputs(x, y, k, sa, sb);
    traced.push_back({x, {}});
    compare_attributes(traced.back(), y, k, batch);
  }
  return traced;
}

// conv2d -> batch_norm (inference), the conv's output read by the norm alone:
// one conv with w' = w * s, b' = (b - mean) * s + beta, s = gamma / sqrt(var + eps) (K).
void fold_batch_norms(std::vector<TracedOp>& ops, const std::vector<Tensor>& outputs) {
  std::unordered_map<const TensorImpl*, int> readers;
  for (const TracedOp& t : ops) {
    for (const Tensor& x : t.op.inputs) readers[x.impl()] += x.defined() ? 1 : 0;
  }
  for (const Tensor& y : outputs) readers[y.impl()] += 1;
  for (size_t k = 0; k + 1 < ops.size(); ++k) {
    trace::Op& c = ops[k].op;
    if (c.name != "conv2d" || readers[c.outputs[0].impl()] != 1) continue;
    size_t j = k + 1;
    while (j < ops.size() && !(ops[j].op.inputs.size() > 0 && ops[j].op.inputs[0].is_same(c.outputs[0]))) ++j;
    if (j == ops.size()) continue;
    const trace::Op& bn = ops[j].op;
    if (bn.name != "batch_norm" || bn.get_int("training") != 0) continue;
    NoGradGuard no_grad;
    const Tensor w = c.inputs[1].detach().cpu().to(DType::Float64);
    const int64_t kk = w.size(0);
    auto channel = [&](size_t i, double fill) {
      return bn.inputs[i].defined() ? bn.inputs[i].detach().cpu().to(DType::Float64)
                                    : full({kk}, fill, {.dtype = DType::Float64});
    };
    const Tensor scale = div(channel(3, 1.0), sqrt(add(channel(2, 0.0), bn.get_double("eps"))));
    const Tensor b = c.inputs[2].defined() ? c.inputs[2].detach().cpu().to(DType::Float64)
                                           : zeros({kk}, {.dtype = DType::Float64});
    const DType t = c.inputs[1].dtype();
    c.inputs[1] = mul(w, scale.view({kk, 1, 1, 1})).to(t);
    c.inputs[2] = add(mul(sub(b, channel(1, 0.0)), scale), channel(4, 0.0)).to(t);
    c.outputs = bn.outputs;
    ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(j));
  }
}

std::vector<std::string> names_or(const std::vector<std::string>& given, size_t count, const char* base) {
  if (!given.empty()) {
    LOOM_CHECK(given.size() == count, ValueError, "[onnx] {} {} names given for {} {}s", given.size(), base,
               count, base);
    return given;
  }
  if (count == 1) return {base};
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) names.push_back(fmt::format("{}{}", base, i));
  return names;
}

// A graph input or output: dim 0 is "batch" where it follows the batch size. An
// output sized by the input's values has every dim named ("<name>_dim<d>").
proto::ValueInfo value_info(const std::string& name, const Tensor& a, const Tensor& b, bool dynamic,
                            bool sized_by_values = false) {
  proto::ValueInfo v{name, proto::element_type(a.dtype()), {}};
  for (int64_t d = 0; d < a.dim(); ++d) {
    const bool follows = dynamic && b.dim() == a.dim() && b.size(d) != a.size(d);
    if (sized_by_values) {
      v.shape.push_back(proto::Dim{fmt::format("{}_dim{}", name, d)});
    } else {
      v.shape.push_back(follows ? proto::Dim{d == 0 ? std::string("batch") : fmt::format("dim{}", d)}
                                : proto::Dim{a.size(d)});
    }
  }
  return v;
}

// The outputs of ops whose result's size depends on the input's values (nonzero,
// masked_select, bincount) and of every op that reads one: both example runs may
// happen to give them one size, which the graph must not fix.
std::unordered_set<const TensorImpl*> sized_by_values(const std::vector<TracedOp>& ops) {
  std::unordered_set<const TensorImpl*> sized;
  for (const TracedOp& t : ops) {
    bool by_values = t.op.name == "nonzero" || t.op.name == "masked_select" || t.op.name == "bincount";
    for (const Tensor& x : t.op.inputs) by_values = by_values || (x.defined() && sized.count(x.impl()) > 0);
    if (!by_values) continue;
    for (const Tensor& y : t.op.outputs) sized.insert(y.impl());
  }
  return sized;
}

void check_inputs(const std::vector<Tensor>& inputs, bool dynamic) {
  LOOM_CHECK(!inputs.empty(), ValueError, "[onnx] export_model needs at least one example input");
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_CHECK(inputs[i].defined(), ValueError, "[onnx] example input {} is an undefined tensor", i);
    LOOM_CHECK(!dynamic || (inputs[i].dim() > 0 && inputs[i].size(0) > 0), ShapeError,
               "[onnx] a dynamic batch needs a batch dim: example input {} has shape {} (or pass "
               "ExportOptions::dynamic_batch = false)",
               i, shape_str(inputs[i].sizes()));
  }
}

// Every op lowered, then the graph's inputs, initializers and outputs.
proto::Model build(const nn::Module& module, const Run& a, const Run& b, std::vector<TracedOp> ops,
                   const ExportOptions& options) {
  proto::Model model{.producer_version = "1", .doc_string = options.doc_string, .graph = {}};
  proto::Graph& g = model.graph;
  g.name = module.type_name();
  const std::vector<std::string> in_names = names_or(options.input_names, a.inputs.size(), "input");
  const std::vector<std::string> out_names = names_or(options.output_names, a.outputs.size(), "output");
  Lowering lowering(g, options.dynamic_batch ? in_names[0] : "");
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    lowering.bind(a.inputs[i], in_names[i]);
    g.inputs.push_back(value_info(in_names[i], a.inputs[i], b.inputs[i], options.dynamic_batch));
  }
  for (const auto& [name, t] : module.named_parameters()) lowering.bind(t, name);
  for (const auto& [name, t] : module.named_buffers()) lowering.bind(t, name);
  // What each op reads that neither an input nor an earlier op made is an
  // initializer: a parameter or buffer under its name, else a constant.
  std::unordered_set<const TensorImpl*> made;
  for (const Tensor& x : a.inputs) made.insert(x.impl());
  int constants = 0;
  for (size_t k = 0; k < ops.size(); ++k) {
    for (const Tensor& x : ops[k].op.inputs) {
      if (!x.defined() || made.count(x.impl())) continue;
      const std::string name = lowering.known(x) ? lowering.name_of(x) : fmt::format("constant_{}", constants++);
      lowering.add_initializer(name, x.detach());
      lowering.bind(x, name);
      made.insert(x.impl());
    }
    lower_op(lowering, ops[k], k);
    for (const Tensor& y : ops[k].op.outputs) made.insert(y.impl());
  }
  const std::unordered_set<const TensorImpl*> by_values = sized_by_values(ops);
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    g.nodes.push_back({.op_type = "Identity", .inputs = {lowering.name_of(a.outputs[i])}, .outputs = {out_names[i]},
                       .name = out_names[i] + "_identity", .attributes = {}});
    g.outputs.push_back(value_info(out_names[i], a.outputs[i], b.outputs[i], options.dynamic_batch,
                                   by_values.count(a.outputs[i].impl()) > 0));
  }
  return model;
}

// Restores the module's training mode.
class EvalScope {
 public:
  explicit EvalScope(nn::Module& m) : module_(m), was_training_(m.is_training()) { m.eval(); }
  ~EvalScope() { module_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  nn::Module& module_;
  bool was_training_;
};

}  // namespace

ExportSummary export_model(nn::Module& module, const Forward& forward, const std::vector<Tensor>& example_inputs,
                           const std::string& path, const ExportOptions& options) {
  check_inputs(example_inputs, options.dynamic_batch);
  EvalScope eval(module);
  NoGradGuard no_grad;
  AutocastGuard no_autocast(std::nullopt);
  FusionGuard unfused(false);
  std::vector<Tensor> inputs_a;
  for (const Tensor& x : example_inputs) inputs_a.push_back(x.detach());
  const Run a = traced_run(forward, inputs_a);
  const Run b = traced_run(forward, other_inputs(inputs_a, options.dynamic_batch));
  std::optional<int64_t> batch;
  if (options.dynamic_batch) batch = inputs_a[0].size(0);
  std::vector<TracedOp> ops = compare_runs(a, b, module, batch);
  if (options.fold_batch_norm) fold_batch_norms(ops, a.outputs);
  proto::Model model = build(module, a, b, std::move(ops), options);

  std::vector<Tensor> keep;
  const proto::Encoded bytes = proto::encode(model, keep);
  AtomicFile file(path, "onnx");
  for (const proto::Encoded::Chunk& c : bytes.chunks()) {
    file.write(c.data != nullptr ? c.data : c.owned.data(), c.size);
  }
  file.commit();

  ExportSummary summary;
  summary.nodes = static_cast<int64_t>(model.graph.nodes.size());
  summary.initializers = static_cast<int64_t>(model.graph.initializers.size());
  for (const proto::TensorValue& t : model.graph.initializers) {
    summary.initializer_bytes += t.value.numel() * static_cast<int64_t>(element_size(t.value.dtype()));
  }
  summary.file_bytes = static_cast<int64_t>(bytes.size());
  for (const proto::ValueInfo& v : model.graph.inputs) summary.input_names.push_back(v.name);
  for (const proto::ValueInfo& v : model.graph.outputs) summary.output_names.push_back(v.name);
  return summary;
}

ExportSummary export_model(nn::Module& module, const std::vector<Tensor>& example_inputs, const std::string& path,
                           const ExportOptions& options) {
  LOOM_CHECK(example_inputs.size() == 1, ValueError,
             "[onnx] module(x) takes one input, got {} example inputs; for a forward of several pass a Forward",
             example_inputs.size());
  return export_model(
      module, [&module](const std::vector<Tensor>& x) { return std::vector<Tensor>{module(x[0])}; }, example_inputs,
      path, options);
}

}  // namespace loom::onnx
