// File: core/ops/fusion_trace.cc
// Fusion by tracing: the chains of a recorded forward (TracedPlan), their
// substitution in later runs (TracedRun), and the traced callable (Traced).
#include "core/ops/fusion_trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/kernel/activation.h"
#include "core/ops/elementwise.h"
#include "core/ops/fused.h"
#include "core/ops/pooling.h"

namespace loom::fusion {

namespace {

using Impl = const TensorImpl*;

bool is_head_name(const std::string& name) {
  return name == "conv2d" || name == "linear" || name == "batch_norm";
}

std::optional<ActivationKind> activation_named(const std::string& name) {
  for (ActivationKind kind : kernel::kActivationKinds) {
    if (name == kernel::activation_info(kind).name) return kind;
  }
  return std::nullopt;
}

const trace::Value* attribute(const std::vector<trace::Attribute>& attributes, std::string_view name) {
  for (const trace::Attribute& a : attributes) {
    if (a.name == name) return &a.value;
  }
  return nullptr;
}

double number(const std::vector<trace::Attribute>& attributes, std::string_view name, double otherwise) {
  const trace::Value* v = attribute(attributes, name);
  if (v == nullptr) return otherwise;
  if (const int64_t* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  if (const double* d = std::get_if<double>(v)) return *d;
  return otherwise;
}

Size2 pair_of(const std::vector<trace::Attribute>& attributes, std::string_view name, int64_t otherwise) {
  const trace::Value* v = attribute(attributes, name);
  const auto* list = v == nullptr ? nullptr : std::get_if<std::vector<int64_t>>(v);
  if (list == nullptr || list->size() != 2) return {otherwise, otherwise};
  return {(*list)[0], (*list)[1]};
}

Conv2dOptions conv_options(const std::vector<trace::Attribute>& attributes) {
  return {.stride = pair_of(attributes, "stride", 1), .padding = pair_of(attributes, "padding", 0),
          .dilation = pair_of(attributes, "dilation", 1),
          .groups = static_cast<int64_t>(number(attributes, "groups", 1))};
}

BatchNormOptions norm_options(const std::vector<trace::Attribute>& attributes) {
  return {.training = number(attributes, "training", 1) != 0, .momentum = number(attributes, "momentum", 0.1),
          .eps = number(attributes, "eps", 1e-5)};
}

// x (the broadcast operand) broadcasts to `to`'s shape without growing it.
bool broadcasts_to(const Shape& x, const Shape& to) {
  if (x.size() > to.size()) return false;
  for (size_t i = 1; i <= x.size(); ++i) {
    const int64_t a = x[x.size() - i], b = to[to.size() - i];
    if (a != b && a != 1) return false;
  }
  return true;
}

bool only_head_so_far(const Block& block) {
  const auto& steps = block.steps();
  return steps.size() == 1 || (steps.size() == 2 && steps[1].kind == StepKind::Bias);
}

// Appends the op's step to `block` and its operands to `operands`: the op
// `name` called with `inputs` and `attributes`, whose input `chain_input` is
// the chain's value so far, of `value_sizes` (for the head: its input x).
// False when the op is no step of a block at this point.
bool append_step(Block& block, std::vector<Tensor>& operands, const std::string& name,
                 const std::vector<Tensor>& inputs, const std::vector<trace::Attribute>& attributes,
                 int chain_input, const Shape& value_sizes) {
  const bool head = block.steps().empty();
  if (name == "conv2d" || name == "linear") {
    if (!head || inputs.size() != 3) return false;
    name == "conv2d" ? block.conv2d(conv_options(attributes)) : block.linear();
    operands.push_back(inputs[1]);
    if (inputs[2].defined()) {
      block.bias();
      operands.push_back(inputs[2]);
    }
    return true;
  }
  if (name == "batch_norm") {  // inputs: x, running_mean, running_var, weight, bias
    const bool after_conv = !head && block.steps()[0].kind == StepKind::Conv2d && only_head_so_far(block);
    if ((!head && !after_conv) || chain_input != 0 || inputs.size() != 5 || value_sizes.size() < 2) return false;
    block.batch_norm(norm_options(attributes));
    operands.insert(operands.end(), {inputs[3], inputs[4], inputs[1], inputs[2]});
    return true;
  }
  if (head) return false;
  if (const std::optional<ActivationKind> kind = activation_named(name)) {
    const trace::Value* given = attribute(attributes, "parameters");
    const auto* values = given == nullptr ? nullptr : std::get_if<std::vector<double>>(given);
    std::vector<double> parameters = values == nullptr ? std::vector<double>{} : *values;
    parameters.resize(std::min<size_t>(parameters.size(),
                                       static_cast<size_t>(kernel::parameter_count(kernel::activation_info(*kind)))));
    block.activation(*kind, std::move(parameters));
    return true;
  }
  if (name == "add" && inputs.size() == 2 && number(attributes, "alpha", 1) == 1) {
    const Tensor& other = inputs[1 - chain_input];
    // The block meets a 16-bit operand with a wider one as the add as written does (autocast's
    // bf16 chain and a float32 shortcut); an integer operand, or float32 with float64, which the
    // add as written promotes, stays outside.
    const DType value_dtype = inputs[chain_input].dtype();
    if (!other.defined() || !is_floating(other.dtype())) return false;
    if (other.dtype() != value_dtype && !is_half_precision(value_dtype) && !is_half_precision(other.dtype())) {
      return false;
    }
    if (other.sizes() == value_sizes) {
      block.add_residual();
    } else if (broadcasts_to(other.sizes(), value_sizes)) {
      block.add();
    } else {
      return false;
    }
    operands.push_back(other);
    return true;
  }
  return false;
}

// The ops (positions) that take each tensor, once per op; -1 marks a tensor an op takes twice.
std::unordered_map<Impl, std::vector<size_t>> consumers_of(const std::vector<trace::Op>& ops) {
  std::unordered_map<Impl, std::vector<size_t>> consumers;
  for (size_t p = 0; p < ops.size(); ++p) {
    std::unordered_set<Impl> seen;
    for (const Tensor& in : ops[p].inputs) {
      if (in.defined() && seen.insert(in.impl()).second) consumers[in.impl()].push_back(p);
    }
  }
  return consumers;
}

// The position of `value` among the op's inputs, when it is there exactly once.
std::optional<int> input_position(const trace::Op& op, Impl value) {
  std::optional<int> found;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (op.inputs[i].defined() && op.inputs[i].impl() == value) {
      if (found) return std::nullopt;
      found = static_cast<int>(i);
    }
  }
  return found;
}

void add_op(TracedChain& chain, const trace::Op& op, int chain_input) {
  chain.ops.push_back(op.index);
  chain.names.push_back(op.name);
  chain.chain_input.push_back(chain_input);
  chain.output_sizes.push_back(op.outputs[0].sizes());
  chain.output_strides.push_back(op.outputs[0].strides());
  chain.output_dtypes.push_back(op.outputs[0].dtype());
}

struct Growth {
  TracedChain chain;
  std::vector<size_t> positions;
  std::string stop;  // why it ended where it did
};

// The longest chain from the head at position p.
Growth grow(const std::vector<trace::Op>& ops, size_t p,
            const std::unordered_map<Impl, std::vector<size_t>>& consumers,
            const std::unordered_set<Impl>& returned, const std::vector<bool>& claimed) {
  Growth g;
  const trace::Op& head = ops[p];
  Block block;
  std::vector<Tensor> operands;
  if (head.inputs.empty() || head.outputs.size() != 1 ||
      !append_step(block, operands, head.name, head.inputs, head.attributes, 0, head.inputs[0].sizes())) {
    g.stop = "it is not a block's head here";
    return g;
  }
  add_op(g.chain, head, 0);
  g.positions.push_back(p);
  g.chain.input_sizes = head.inputs[0].sizes();
  g.chain.input_dtype = head.inputs[0].dtype();
  g.chain.module = head.module;
  for (size_t at = p;;) {
    const Tensor& value = ops[at].outputs[0];
    auto found = consumers.find(value.impl());
    const size_t uses = found == consumers.end() ? 0 : found->second.size();
    if (returned.count(value.impl()) != 0) {
      g.stop = fmt::format("the output of {} is returned", ops[at].name);
    } else if (uses != 1) {
      g.stop = fmt::format("the output of {} feeds {} ops", ops[at].name, uses);
    }
    if (!g.stop.empty()) break;
    const size_t q = found->second[0];
    const trace::Op& next = ops[q];
    const std::optional<int> input = input_position(next, value.impl());
    Block trial = block;
    std::vector<Tensor> trial_operands = operands;
    if (claimed[q] || next.in_fused_block || !input || next.outputs.size() != 1 ||
        !append_step(trial, trial_operands, next.name, next.inputs, next.attributes, *input, value.sizes())) {
      g.stop = fmt::format("{} is followed by {}, which does not fuse after it", ops[at].name, next.name);
      break;
    }
    block = std::move(trial);
    operands = std::move(trial_operands);
    add_op(g.chain, next, *input);
    g.positions.push_back(q);
    at = q;
  }
  g.chain.block = block.str();
  return g;
}

// A max pool whose channels-last output (more than one channel and one pixel),
// in no layout its caller chose, only a reshape to (N, C * H * W) takes: that
// reshape copies it, and would view it were it contiguous
// (TracedPlan::contiguous_pools).
bool pool_before_flatten(const std::vector<trace::Op>& ops, size_t p,
                         const std::unordered_map<Impl, std::vector<size_t>>& consumers,
                         const std::unordered_set<Impl>& returned) {
  const trace::Op& pool = ops[p];
  if (pool.name != "max_pool2d" || pool.in_fused_block || pool.outputs.size() != 1 ||
      attribute(pool.attributes, "output_format") != nullptr) {  // a layout the caller chose stays
    return false;
  }
  const Tensor& y = pool.outputs[0];
  if (y.dim() != 4 || y.size(1) == 1 || y.size(2) * y.size(3) == 1 || returned.count(y.impl()) != 0 ||
      !has_layout(y.sizes(), y.strides(), MemoryFormat::ChannelsLast)) {
    return false;
  }
  auto found = consumers.find(y.impl());
  if (found == consumers.end() || found->second.size() != 1) return false;
  const trace::Op& next = ops[found->second[0]];
  return next.name == "reshape" && next.outputs.size() == 1 &&
         next.outputs[0].sizes() == Shape{y.size(0), y.size(1) * y.size(2) * y.size(3)};
}

// Such a pool, run again with a contiguous output; nullopt when its call no longer looks like one.
std::optional<Tensor> contiguous_pool(std::string_view name, const std::vector<Tensor>& inputs,
                                      const std::vector<trace::Attribute>& attributes) {
  if (name != "max_pool2d" || inputs.size() != 1 || !inputs[0].defined() || inputs[0].dim() != 4) {
    return std::nullopt;
  }
  const Pool2dOptions options{.kernel_size = pair_of(attributes, "kernel_size", 1).array(),
                              .stride = pair_of(attributes, "stride", 1).array(),
                              .padding = pair_of(attributes, "padding", 0).array(),
                              .ceil_mode = number(attributes, "ceil_mode", 0) != 0,
                              .output_format = MemoryFormat::Contiguous};
  return max_pool2d(inputs[0], options);
}

// The data-less tensor a chain's middle op hands on.
Tensor stand_in(const TracedChain& chain, int position, Device device) {
  const auto p = static_cast<size_t>(position);
  return trace::stand_in(chain.output_sizes[p], chain.output_strides[p], chain.output_dtypes[p], device);
}

// Where an op ran, for messages: its module's path, or the forward's top level.
std::string where(const std::string& module) { return module.empty() ? std::string("the forward") : module; }

std::string where(const TracedChain& chain) { return where(chain.module); }

}  // namespace

// ---- the plan --------------------------------------------------------------------------

TracedPlan TracedPlan::from_trace(const std::vector<trace::Op>& ops, const std::vector<Tensor>& returned) {
  const auto consumers = consumers_of(ops);
  std::unordered_set<Impl> returned_set;
  for (const Tensor& t : returned) {
    if (t.defined()) returned_set.insert(t.impl());
  }
  TracedPlan plan;
  std::vector<bool> claimed(ops.size(), false);
  for (size_t p = 0; p < ops.size(); ++p) {
    if (claimed[p] || ops[p].in_fused_block || !is_head_name(ops[p].name)) continue;
    Growth g = grow(ops, p, consumers, returned_set, claimed);
    if (g.positions.size() < 2) {
      plan.unfused_.push_back(fmt::format("{} in {}: {}", ops[p].name, where(ops[p].module), g.stop));
      continue;
    }
    for (size_t q : g.positions) claimed[q] = true;
    const int c = static_cast<int>(plan.chains_.size());
    for (size_t k = 0; k < g.chain.ops.size(); ++k) {
      plan.located_.push_back({g.chain.ops[k], {c, static_cast<int>(k)}});
    }
    plan.chains_.push_back(std::move(g.chain));
  }
  std::sort(plan.located_.begin(), plan.located_.end());
  for (size_t p = 0; p < ops.size(); ++p) {
    if (!pool_before_flatten(ops, p, consumers, returned_set)) continue;
    plan.contiguous_pools_.push_back(ops[p].index);
    plan.pool_modules_.push_back(ops[p].module);
  }
  return plan;
}

std::pair<int, int> TracedPlan::locate(int64_t op_index) const {
  auto it = std::lower_bound(located_.begin(), located_.end(), op_index,
                             [](const auto& entry, int64_t index) { return entry.first < index; });
  if (it == located_.end() || it->first != op_index) return {-1, -1};
  return it->second;
}

std::string TracedPlan::str() const {
  std::string out = fmt::format("fusion by tracing: {} chain{} run as blocks, {} head{} alone\n", chains_.size(),
                                chains_.size() == 1 ? "" : "s", unfused_.size(), unfused_.size() == 1 ? "" : "s");
  for (const TracedChain& chain : chains_) {
    out += fmt::format("  fused  {}: {}  (ops {}: {})\n", where(chain), chain.block, fmt::join(chain.ops, ", "),
                       fmt::join(chain.names, " -> "));
  }
  for (const std::string& alone : unfused_) out += fmt::format("  alone  {}\n", alone);
  for (size_t i = 0; i < contiguous_pools_.size(); ++i) {
    out += fmt::format("  layout max_pool2d in {} (op {}): writes its output contiguous, so the flatten after it "
                       "is a view\n",
                       where(pool_modules_[i]), contiguous_pools_[i]);
  }
  return out;
}

// ---- a run -----------------------------------------------------------------------------

struct TracedRun::Running {
  bool started = false;
  bool skipped = false;  // the head did not match its trace: the chain runs unfused
  int next = 0;
  Tensor x, value;
  Block block;
  std::vector<Tensor> operands;
};

TracedRun::TracedRun(const TracedPlan& plan)
    : plan_(plan), running_(plan.chains().size()), scope_(*this) {}

TracedRun::~TracedRun() = default;

std::optional<Tensor> TracedRun::substitute(int64_t index, const char* name, const std::vector<Tensor>& inputs,
                                            const std::vector<trace::Attribute>& attributes) {
  const std::vector<int64_t>& pools = plan_.contiguous_pools();
  if (std::binary_search(pools.begin(), pools.end(), index)) return contiguous_pool(name, inputs, attributes);
  const auto [c, position] = plan_.locate(index);
  if (c < 0) return std::nullopt;
  const TracedChain& chain = plan_.chains()[static_cast<size_t>(c)];
  Running& run = running_[static_cast<size_t>(c)];
  if (position == 0) {
    run = Running{};
    const bool matches = name == chain.names[0] && !inputs.empty() && inputs[0].defined() &&
                         inputs[0].sizes() == chain.input_sizes && inputs[0].dtype() == chain.input_dtype;
    if (!matches || !append_step(run.block, run.operands, name, inputs, attributes, 0, inputs[0].sizes())) {
      run = Running{};  // append_step may have begun the block
      run.skipped = true;
      return std::nullopt;
    }
    run.started = true;
    run.x = inputs[0];
    run.next = 1;
    run.value = stand_in(chain, 0, inputs[0].device());
    return run.value;
  }
  if (run.skipped || !run.started) return std::nullopt;
  return advance(run, chain, position, inputs, attributes);
}

std::optional<Tensor> TracedRun::advance(Running& run, const TracedChain& chain, int position,
                                         const std::vector<Tensor>& inputs,
                                         const std::vector<trace::Attribute>& attributes) {
  const size_t k = static_cast<size_t>(position);
  const int input = chain.chain_input[k];
  const bool takes_value = position == run.next && static_cast<size_t>(input) < inputs.size() &&
                           inputs[static_cast<size_t>(input)].is_same(run.value);
  LOOM_CHECK(takes_value && append_step(run.block, run.operands, chain.names[k], inputs, attributes, input,
                                        chain.output_sizes[k - 1]),
             ValueError,
             "[fusion by tracing] op {} ({}) of the chain {} in {} no longer matches its trace (it does not take "
             "the chain's value as its input {}, or its arguments changed kind); trace the forward again, or run "
             "it with loom::FusionGuard(false)",
             chain.ops[k], chain.names[k], chain.block, where(chain), input);
  if (k + 1 < chain.ops.size()) {
    run.next = position + 1;
    run.value = stand_in(chain, position, run.x.device());
    return run.value;
  }
  Tensor y = run.block(run.x, run.operands);
  // What the ops as written returned: under autocast a block may keep another dtype.
  if (y.dtype() != chain.output_dtypes[k]) y = y.to(chain.output_dtypes[k]);
  const Shape& strides = chain.output_strides[k];
  if (y.dim() == 4 && y.strides() != strides && has_layout(y.sizes(), strides, MemoryFormat::ChannelsLast)) {
    y = y.contiguous(MemoryFormat::ChannelsLast);  // the layout the unfused ops gave
  }
  run = Running{};
  ++blocks_run_;
  return y;
}

void TracedRun::finish() const {
  for (size_t c = 0; c < running_.size(); ++c) {
    const TracedChain& chain = plan_.chains()[c];
    LOOM_CHECK(!running_[c].started, ValueError,
               "[fusion by tracing] the chain {} in {} began (op {}) but its op {} ({}) never ran: the forward "
               "left its trace midway; trace it again, or run it with loom::FusionGuard(false)",
               chain.block, where(chain), chain.ops[0], chain.ops[static_cast<size_t>(running_[c].next)],
               chain.names[static_cast<size_t>(running_[c].next)]);
  }
}

// ---- the registry fusion::report() reads ------------------------------------------------

namespace {

struct PlanRegistry {
  std::mutex mutex;
  std::map<std::string, std::string> plans;  // label -> TracedPlan::str()
};

PlanRegistry& plan_registry() {
  static PlanRegistry registry;
  return registry;
}

}  // namespace

void note_traced_plan(const std::string& label, const TracedPlan& plan) {
  PlanRegistry& r = plan_registry();
  std::lock_guard lock(r.mutex);
  r.plans[label] = plan.str();
}

std::string traced_plans_str() {
  PlanRegistry& r = plan_registry();
  std::lock_guard lock(r.mutex);
  std::string out;
  for (const auto& [label, text] : r.plans) out += label + ": " + text;
  return out;
}

void clear_traced_plans() {
  PlanRegistry& r = plan_registry();
  std::lock_guard lock(r.mutex);
  r.plans.clear();
}

// ---- the traced callable ---------------------------------------------------------------

Traced::Traced(std::function<Tensor(const Tensor&)> forward) : forward_(std::move(forward)) {
  LOOM_CHECK(forward_ != nullptr, ValueError, "[fusion::Traced] the forward is empty");
}

Tensor Traced::operator()(const Tensor& x) {
  if (!fusion_enabled() || trace::active()) return forward_(x);  // as written (inside a trace: its ops)
  const auto key = std::make_tuple(x.sizes(), x.dtype(), x.device());
  if (traced_for_ != key) {
    std::vector<trace::Op> ops;
    Tensor y, recorded_y;
    {
      trace::Recorder recorder(trace::Keep::Shapes);
      y = forward_(x);
      ops = recorder.ops();
      recorded_y = recorder.recorded(y);
    }
    plan_ = TracedPlan::from_trace(ops, {recorded_y});
    traced_for_ = key;
    note_traced_plan(fmt::format("Traced {} {}", shape_str(x.sizes()), dtype_name(x.dtype())), plan_);
    return y;
  }
  TracedRun run(plan_);
  Tensor y = forward_(x);
  run.finish();
  return y;
}

}  // namespace loom::fusion
