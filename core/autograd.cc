// File: core/autograd.cc
// The autograd engine: recording nodes, the reverse topological walk, grad accumulation.
#include "core/autograd.h"
#include "core/autograd_internal.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/anomaly.h"
#include "core/cpu/elementwise.h"
#include "core/error.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/elementwise.h"
#endif

namespace loom {

namespace {

thread_local bool grad_mode = true;

struct InputMeta {
  Shape sizes;
  DType dtype;
  Device device;
};

// out = a + b, for gradients of one shape, dtype and device (out may be a).
void sum_into(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.device().is_cpu()) {
    cpu::add_scaled(out.strided(), a.strided(), b.strided(), 1.0);
    return;
  }
#ifdef LOOM_WITH_CUDA
  DeviceGuard guard(out.device());
  cuda::add_scaled(out.strided(), a.strided(), b.strided(), 1.0);
#endif
}

// a + b in a new tensor (never a write into a gradient another node may hold)
// in a's layout, made in one pass. A contiguous clone and then an add in place
// moved twice the bytes and turned channels-last gradients into NCHW ones.
Tensor sum_of(const Tensor& a, const Tensor& b) {
  Tensor total = empty_like(a);
  sum_into(total, a, b);
  return total;
}

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn backward, BackwardSumFn backward_sum, std::vector<InputMeta> inputs,
               const std::vector<Tensor>& saved)
      : name_(std::move(name)),
        backward_(std::move(backward)),
        backward_sum_(std::move(backward_sum)),
        inputs_(std::move(inputs)) {
    for (const Tensor& t : saved) {
      if (t.defined()) saved_.push_back({t.storage(), t.storage()->version()});
    }
  }

  const std::string& name() const override { return name_; }

  std::vector<Tensor> apply(const Tensor& grad_output) override {
    check_saved();
    std::vector<Tensor> grads = backward_(grad_output);
    check_grads(grads);
    return grads;
  }

  bool folds_gradient_sum() const override { return backward_sum_ != nullptr; }

  std::vector<Tensor> apply_sum(const Tensor& grad_a, const Tensor& grad_b) override {
    if (backward_sum_ == nullptr) return Node::apply_sum(grad_a, grad_b);
    check_saved();
    std::vector<Tensor> grads = backward_sum_(grad_a, grad_b);
    check_grads(grads);
    return grads;
  }

  void release() override {
    backward_ = nullptr;
    backward_sum_ = nullptr;
    saved_.clear();
  }

 private:
  struct SavedVersion {
    std::shared_ptr<Storage> storage;
    uint64_t version;
  };

  void check_saved() const {
    LOOM_CHECK(backward_ != nullptr, AutogradError,
               "[backward] trying to backward through the graph a second time: '{}' has already "
               "freed its saved tensors; pass retain_graph=true to the first backward() if you "
               "need to run backward twice",
               name_);
    for (const SavedVersion& saved : saved_) {
      LOOM_CHECK(saved.storage->version() == saved.version, AutogradError,
                 "[backward] a tensor saved by '{}' was modified in place after the forward pass "
                 "(version {}, expected {}); clone it before modifying it, or modify it after "
                 "backward",
                 name_, saved.storage->version(), saved.version);
    }
  }

  void check_grads(const std::vector<Tensor>& grads) const {
    LOOM_CHECK(grads.size() == inputs_.size(), AutogradError,
               "[backward] '{}' returned {} gradients for {} inputs", name_, grads.size(),
               inputs_.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined() || next[i] == nullptr) continue;
      const InputMeta& in = inputs_[i];
      LOOM_CHECK(grads[i].sizes() == in.sizes && grads[i].dtype() == in.dtype &&
                     grads[i].device() == in.device,
                 AutogradError,
                 "[backward] '{}' returned a gradient {} {} on {} for input {} which is {} {} on {}",
                 name_, shape_str(grads[i].sizes()), dtype_name(grads[i].dtype()),
                 grads[i].device().str(), i, shape_str(in.sizes), dtype_name(in.dtype),
                 in.device.str());
    }
  }

  std::string name_;
  BackwardFn backward_;
  BackwardSumFn backward_sum_;  // may be empty
  std::vector<InputMeta> inputs_;
  std::vector<SavedVersion> saved_;
};

// A dtype conversion (Tensor::to, autocast's operand casts): the gradient goes
// back to the input's dtype.
class CastNode final : public Node {
 public:
  explicit CastNode(DType source) : source_(source) {}

  const std::string& name() const override {
    static const std::string name = "to_dtype";
    return name;
  }

  std::vector<Tensor> apply(const Tensor& grad_output) override {
    return {grad_output.to(source_)};
  }

  DType source() const { return source_; }

 private:
  DType source_;
};

// The sink of a leaf: adds incoming gradients into leaf.grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {}

  bool has_hooks() const { return !leaf_.impl()->post_accumulate_hooks.empty(); }

  const std::string& name() const override {
    static const std::string name = "accumulate_grad";
    return name;
  }

  std::vector<Tensor> apply(const Tensor& grad) override {
    if (!leaf_.grad().defined()) {
      // Never alias a gradient that others may hold; one nobody else holds is kept.
      leaf_.set_grad(grad.sole_owner() ? grad : grad.clone());
    } else {
      sum_into(leaf_.grad(), leaf_.grad(), grad);
    }
    // A copy: a hook may register or remove hooks.
    auto hooks = leaf_.impl()->post_accumulate_hooks;
    for (auto& [handle, hook] : hooks) hook(leaf_);
    return {};
  }

 private:
  Tensor leaf_;
};

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl();
  std::shared_ptr<Node> node = impl->grad_accumulator.lock();
  if (!node) {
    node = std::make_shared<AccumulateGrad>(leaf);
    impl->grad_accumulator = node;
  }
  return node;
}

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  return t.grad_fn() ? t.grad_fn() : grad_accumulator(t);
}

Tensor initial_gradient(const Tensor& root, const Tensor& gradient) {
  if (!gradient.defined()) {
    LOOM_CHECK(root.numel() == 1, AutogradError,
               "[backward] a gradient can be created implicitly only for one-element outputs, "
               "got shape {}; pass backward(gradient) with a gradient of that shape",
               shape_str(root.sizes()));
    return ones(root.sizes(), root.options());
  }
  LOOM_CHECK(gradient.sizes() == root.sizes() && gradient.dtype() == root.dtype() &&
                 gradient.device() == root.device(),
             ValueError, "[backward] gradient {} {} on {} does not match the output {} {} on {}",
             shape_str(gradient.sizes()), dtype_name(gradient.dtype()), gradient.device().str(),
             shape_str(root.sizes()), dtype_name(root.dtype()), root.device().str());
  return gradient.detach();
}

// The gradient that reached a node so far: the sum of what arrived, and at most
// one more gradient left for the node to add itself (Node::folds_gradient_sum).
struct PendingGradient {
  Tensor sum;
  Tensor addend;  // undefined unless the node folds the sum

  // Adds `grad` (a gradient for the same output) as `target` can best take it.
  void add(const Tensor& grad, const Node& target) {
    if (!addend.defined() && target.folds_gradient_sum() && !anomaly_mode_enabled()) {
      addend = grad;
      return;
    }
    sum = sum_of(sum, grad);
  }
};

// node.apply on the gradient's device (the device of the op that recorded the
// node), so a backward on cuda:1 runs on GPU 1; timed into the row of the layer
// that recorded the node while profiling.
std::vector<Tensor> apply_on_device(Node& node, const PendingGradient& grad) {
  DeviceGuard guard(grad.sum.device());
  std::optional<ProfileScope> scope;
  if (Profiler::enabled()) {
    scope.emplace(node.profile_row.value_or(Profiler::other_row()), ProfilePhase::Backward, grad.sum.device());
  }
  return grad.addend.defined() ? node.apply_sum(grad.sum, grad.addend) : node.apply(grad.sum);
}

// Gradients on their way into leaves through a CastNode (a model's weights
// under autocast: one per parameter). They are converted together once the
// rest of the backward has run, one launch per dtype where each alone made
// one, then handed to the leaves. A leaf with hooks is served on the spot, so
// its hook still fires while the backward runs (DistributedDataParallel
// overlaps its all-reduce with that), and anomaly mode checks every node.
class DeferredCasts {
 public:
  // Takes node's gradient when node can wait; false when it runs now.
  bool take(Node& node, const Tensor& grad) {
    auto* cast = dynamic_cast<CastNode*>(&node);
    if (cast == nullptr || anomaly_mode_enabled() || Profiler::enabled()) return false;
    auto* sink = dynamic_cast<AccumulateGrad*>(node.next[0].get());
    if (sink == nullptr || sink->has_hooks()) return false;
    waiting_[cast->source()].push_back({grad, node.next[0]});
    return true;
  }

  void deliver() {
    for (auto& [dtype, items] : waiting_) {
      std::vector<Tensor> grads;
      for (const Waiting& w : items) grads.push_back(w.grad);
      const std::vector<Tensor> converted = to_all(grads, dtype);
      for (size_t i = 0; i < items.size(); ++i) items[i].sink->apply(converted[i]);
    }
    waiting_.clear();
  }

 private:
  struct Waiting {
    Tensor grad;
    std::shared_ptr<Node> sink;  // the leaf's AccumulateGrad
  };
  std::map<DType, std::vector<Waiting>> waiting_;
};

// Makes `node` the grad_fn of `output`, its inputs' gradient edges its next.
void attach(std::shared_ptr<Node> node, const std::vector<Tensor>& inputs, Tensor& output) {
  for (const Tensor& t : inputs) node->next.push_back(gradient_edge(t));
  if (Profiler::enabled()) node->profile_row = Profiler::current_row();
  if (anomaly_mode_enabled()) {
    node->module = anomaly_module();
    check_forward_finite(node->name(), node->module, inputs, output);
  }
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
}

}  // namespace

std::vector<Node*> backward_order(Node* root) {
  std::vector<Node*> post_order;
  std::unordered_set<Node*> seen{root};
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next_child] = stack.back();
    if (next_child < node->next.size()) {
      Node* child = node->next[next_child++].get();
      if (child != nullptr && seen.insert(child).second) stack.push_back({child, 0});
    } else {
      post_order.push_back(node);
      stack.pop_back();
    }
  }
  std::reverse(post_order.begin(), post_order.end());
  return post_order;
}

bool grad_mode_enabled() { return grad_mode; }

NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!grad_mode) return false;
  return std::any_of(inputs.begin(), inputs.end(),
                     [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

void record(std::string name, const std::vector<Tensor>& inputs, Tensor& output,
            BackwardFn backward, const std::vector<Tensor>& saved) {
  record(std::move(name), inputs, output, std::move(backward), nullptr, saved);
}

void record(std::string name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward,
            BackwardSumFn backward_sum, const std::vector<Tensor>& saved) {
  std::vector<InputMeta> metas;
  for (const Tensor& t : inputs) {
    metas.push_back(t.defined() ? InputMeta{t.sizes(), t.dtype(), t.device()} : InputMeta{});
  }
  attach(std::make_shared<FunctionNode>(std::move(name), std::move(backward), std::move(backward_sum),
                                        std::move(metas), saved),
         inputs, output);
}

std::vector<Tensor> Node::apply_sum(const Tensor& grad_a, const Tensor& grad_b) {
  return apply(sum_of(grad_a, grad_b));
}

void record_cast(const Tensor& input, Tensor& output) {
  attach(std::make_shared<CastNode>(input.dtype()), {input}, output);
}

void check_inplace(const Tensor& tensor, std::string_view op) {
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    LOOM_CHECK(tensor.strides()[d] != 0 || tensor.sizes()[d] <= 1, ValueError,
               "[{}] the destination (shape {}, strides {}) has expanded dims whose elements "
               "share memory, so an in-place write is ambiguous; .clone() it first",
               op, shape_str(tensor.sizes()), shape_str(tensor.strides()));
  }
  if (grad_mode && tensor.requires_grad()) {
    LOOM_CHECK(!tensor.is_leaf(), AutogradError,
               "[{}] a leaf tensor that requires grad (shape {}) cannot be modified in place "
               "while grad mode is on; do the update inside a loom::NoGradGuard, as optimizers do",
               op, shape_str(tensor.sizes()));
    throw AutogradError(fmt::format(
        "[{}] in-place ops are not recorded by autograd, and this tensor (the output of '{}') "
        "requires grad; use the out-of-place op (y = y + x, not y += x)",
        op, tensor.grad_fn()->name()));
  }
  tensor.storage()->bump_version();
}

int64_t register_post_accumulate_grad_hook(const Tensor& leaf, GradHook hook) {
  LOOM_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(), AutogradError,
             "[register_post_accumulate_grad_hook] hooks go on leaf tensors that require grad "
             "(parameters); this tensor is {}",
             !leaf.defined() ? "undefined" : leaf.is_leaf() ? "a leaf without requires_grad"
                                                            : "the output of '" + leaf.grad_fn()->name() + "'");
  LOOM_CHECK(hook != nullptr, ValueError, "[register_post_accumulate_grad_hook] the hook is empty");
  static std::atomic<int64_t> next_handle{0};
  int64_t handle = next_handle++;
  leaf.impl()->post_accumulate_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, int64_t handle) {
  auto& hooks = leaf.impl()->post_accumulate_hooks;
  std::erase_if(hooks, [handle](const auto& entry) { return entry.first == handle; });
}

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  LOOM_CHECK(root.defined() && root.requires_grad(), AutogradError,
             "[backward] this tensor does not require grad and has no history; set "
             "requires_grad on the leaves you want gradients for");
  NoGradGuard no_grad;
  std::shared_ptr<Node> root_node = gradient_edge(root);
  std::unordered_map<Node*, PendingGradient> pending{{root_node.get(), {initial_gradient(root, gradient)}}};
  DeferredCasts deferred;
  for (Node* node : backward_order(root_node.get())) {
    auto it = pending.find(node);
    if (it == pending.end()) continue;  // no gradient reached it
    PendingGradient grad = std::move(it->second);
    pending.erase(it);
    // A CastNode (nothing saved to release); it never folds a sum.
    if (!grad.addend.defined() && deferred.take(*node, grad.sum)) continue;
    std::vector<Tensor> grads = apply_on_device(*node, grad);
    if (anomaly_mode_enabled()) check_backward_finite(node->name(), node->module, grad.sum, grads);
    if (!retain_graph) node->release();
    for (size_t i = 0; i < grads.size(); ++i) {
      Node* target = node->next[i].get();
      if (target == nullptr || !grads[i].defined()) continue;
      auto [slot, inserted] = pending.try_emplace(target, PendingGradient{grads[i]});
      if (!inserted) slot->second.add(grads[i], *target);
    }
  }
  deferred.deliver();
}

}  // namespace loom
