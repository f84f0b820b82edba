// File: layers/fused.cc
// The fused layers' forwards, FusedResidual, and nn::fuse's in-place rewrite
// of Sequentials.
// N batch, C channels, H, W.
#include "layers/fused.h"

#include <optional>
#include <typeinfo>
#include <utility>

#include "core/error.h"
#include "core/ops/fused.h"
#include "layers/activation.h"
#include "layers/container.h"
#include "layers/flatten.h"
#include "layers/pooling.h"

namespace loom::nn {

Tensor FusedConv2dReLU::forward(const Tensor& x) {
  return conv2d_bias_relu(padded_input(x), weight(), bias(), options());
}

Tensor LinearReLU::forward(const Tensor& x) { return linear_relu(x, weight(), bias()); }

// As BatchNorm2d::forward, with batch_norm_relu in place of batch_norm.
Tensor BatchNormReLU::forward(const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() == 4 && x.size(1) == num_features(), ShapeError,
             "[BatchNormReLU] expects input (N, {}, H, W), got shape {}", num_features(),
             x.defined() ? shape_str(x.sizes()) : "undefined");
  const BatchNorm2dOptions& o = options();
  const double momentum = forward_momentum();
  Tensor y = batch_norm_relu(x, running_mean(), running_var(), weight(), bias(),
                             {.training = is_training() || !o.track_running_stats,
                              .momentum = momentum, .eps = o.eps});
  if (updates_running_stats()) count_batch();
  return y;
}

// ---- the general fused layers ----------------------------------------------------------

namespace {

void add_activations(fusion::Block& block, const std::vector<std::shared_ptr<Activation>>& activations) {
  for (const auto& a : activations) block.activation(a->kind(), a->parameters());
}

// block(x, operands), then + residual in the same block when one is given.
Tensor run_with_residual(fusion::Block block, std::vector<Tensor> operands, const Tensor& x,
                         const Tensor& residual) {
  if (residual.defined()) {
    block.add_residual();
    operands.push_back(residual);
  }
  return block(x, operands);
}

}  // namespace

FusedBatchNorm2d::FusedBatchNorm2d(const BatchNorm2d& bn,
                                   std::vector<std::shared_ptr<Activation>> activations, bool absorbed)
    : BatchNorm2d(bn), activations_(std::move(activations)), absorbed_(absorbed) {}

BatchNormOptions FusedBatchNorm2d::step_options() {
  return {.training = is_training() || !options().track_running_stats,
          .momentum = forward_momentum(),
          .eps = options().eps};
}

std::vector<Tensor> FusedBatchNorm2d::operands() const {
  return {weight(), bias(), running_mean(), running_var()};
}

void FusedBatchNorm2d::count_if_training() {
  if (updates_running_stats()) count_batch();
}

fusion::Block FusedBatchNorm2d::block() {
  LOOM_CHECK(!absorbed_, ValueError,
             "[FusedBatchNorm2d] this batch norm is absorbed into the FusedConv2d before it, which runs "
             "it in its own block; ask that layer for block()");
  fusion::Block block = fusion::Block().batch_norm(step_options());
  add_activations(block, activations_);
  return block;
}

Tensor FusedBatchNorm2d::run_block(const Tensor& x, const Tensor& residual) {
  LOOM_CHECK(x.defined() && x.dim() == 4 && x.size(1) == num_features(), ShapeError,
             "[FusedBatchNorm2d] expects input (N, {}, H, W), got shape {}", num_features(),
             x.defined() ? shape_str(x.sizes()) : "undefined");
  Tensor y = run_with_residual(block(), operands(), x, residual);
  count_if_training();
  return y;
}

Tensor FusedBatchNorm2d::forward(const Tensor& x) { return absorbed_ ? x : run_block(x, Tensor()); }

Tensor FusedBatchNorm2d::forward_residual(const Tensor& x, const Tensor& residual) {
  return run_block(x, residual);  // block() refuses an absorbed norm
}

FusedConv2d::FusedConv2d(const Conv2d& conv, std::shared_ptr<FusedBatchNorm2d> norm,
                         std::vector<std::shared_ptr<Activation>> activations)
    : Conv2d(conv), norm_(std::move(norm)), activations_(std::move(activations)) {}

fusion::Block FusedConv2d::block() {
  fusion::Block block = fusion::Block().conv2d(options());
  if (bias().defined()) block.bias();
  if (norm_) block.batch_norm(norm_->step_options());
  add_activations(block, activations_);
  return block;
}

Tensor FusedConv2d::run_block(const Tensor& x, const Tensor& residual) {
  std::vector<Tensor> operands = {weight()};
  if (bias().defined()) operands.push_back(bias());
  if (norm_) {
    for (const Tensor& t : norm_->operands()) operands.push_back(t);
  }
  Tensor y = run_with_residual(block(), std::move(operands), padded_input(x), residual);
  if (norm_) norm_->count_if_training();
  return y;
}

Tensor FusedConv2d::forward(const Tensor& x) { return run_block(x, Tensor()); }

Tensor FusedConv2d::forward_residual(const Tensor& x, const Tensor& residual) {
  return run_block(x, residual);
}

FusedLinear::FusedLinear(const Linear& linear, std::vector<std::shared_ptr<Activation>> activations)
    : Linear(linear), activations_(std::move(activations)) {}

fusion::Block FusedLinear::block() {
  fusion::Block block = fusion::Block().linear();
  if (bias().defined()) block.bias();
  add_activations(block, activations_);
  return block;
}

Tensor FusedLinear::run_block(const Tensor& x, const Tensor& residual) {
  std::vector<Tensor> operands = {weight()};
  if (bias().defined()) operands.push_back(bias());
  return run_with_residual(block(), std::move(operands), x, residual);
}

Tensor FusedLinear::forward(const Tensor& x) { return run_block(x, Tensor()); }

Tensor FusedLinear::forward_residual(const Tensor& x, const Tensor& residual) {
  return run_block(x, residual);
}

// ---- FusedResidual -------------------------------------------------------------------------

namespace {

template <class M>
bool is_exactly(const Module& module) {
  return typeid(module) == typeid(M);
}

// A layer after a run's head that forwards its input unchanged.
bool passes_through(const Module& module) {
  if (is_exactly<Identity>(module)) return true;
  return is_exactly<FusedBatchNorm2d>(module) && static_cast<const FusedBatchNorm2d&>(module).absorbed();
}

// Where a residual's last branch ends in a fused run: the branch's layers and
// the index of the run's head among them.
struct Tail {
  const NamedModules* layers = nullptr;
  size_t head = 0;
  FusedHead* fused = nullptr;
};

std::optional<Tail> fused_tail(const Residual& residual) {
  const NamedModules& children = residual.named_children();
  if (children.empty() || !is_exactly<Sequential>(*children.back().second)) return std::nullopt;
  const NamedModules& layers = children.back().second->named_children();
  size_t end = layers.size();
  while (end > 0 && passes_through(*layers[end - 1].second)) --end;
  if (end == 0) return std::nullopt;
  auto* fused = dynamic_cast<FusedHead*>(layers[end - 1].second.get());
  if (fused == nullptr) return std::nullopt;
  return Tail{.layers = &layers, .head = end - 1, .fused = fused};
}

Tail checked_tail(const Residual& residual) {
  std::optional<Tail> tail = fused_tail(residual);
  const NamedModules& children = residual.named_children();
  LOOM_CHECK(tail.has_value(), ValueError,
             "[FusedResidual] the last branch ({}: {}) does not end in a fused run (a Sequential whose last "
             "layers are a FusedConv2d, FusedLinear or FusedBatchNorm2d and the layers it absorbed); call "
             "nn::fuse on the model, which makes a FusedResidual only where the branch does",
             children.empty() ? "none" : children.back().first,
             children.empty() ? "-" : children.back().second->type_name());
  return *tail;
}

}  // namespace

FusedResidual::FusedResidual(const Residual& residual) : Residual(residual) { checked_tail(*this); }

fusion::Block FusedResidual::block() { return checked_tail(*this).fused->block().add_residual(); }

// x + b(a(x)) as b's layers up to the head, then head(h) + x in the head's block.
Tensor FusedResidual::forward(const Tensor& x) {
  const std::optional<Tail> tail = fused_tail(*this);
  if (!tail) return Residual::forward(x);
  const NamedModules& children = named_children();
  Tensor h = x;
  for (size_t i = 0; i + 1 < children.size(); ++i) h = (*children[i].second)(h);  // a
  const NamedModules& layers = *tail->layers;
  for (size_t i = 0; i < tail->head; ++i) h = (*layers[i].second)(h);
  Tensor y = layers[tail->head].second->call(h, [&] { return tail->fused->forward_residual(h, x); });
  for (size_t i = tail->head + 1; i < layers.size(); ++i) y = (*layers[i].second)(y);
  return y;
}

// ---- nn::fuse: find runs, rewrite Sequentials ----------------------------------------------

namespace {

// The activations from children[at] on (a run's tail), as shared pointers.
std::vector<std::shared_ptr<Activation>> activations_from(const NamedModules& children, size_t at) {
  std::vector<std::shared_ptr<Activation>> out;
  for (; at < children.size(); ++at) {
    auto activation = std::dynamic_pointer_cast<Activation>(children[at].second);
    if (!activation) break;
    out.push_back(activation);
  }
  return out;
}

std::shared_ptr<Module> with_mode(std::shared_ptr<Module> module, const Module& like) {
  module->train(like.is_training());
  return module;
}

// Replaces the run starting at children[i] (if one starts there) and returns its length; 0 when none.
size_t fuse_run(NamedModules& children, size_t i) {
  const Module& first = *children[i].second;
  std::shared_ptr<FusedBatchNorm2d> norm;
  size_t tail = i + 1;
  if (is_exactly<Conv2d>(first) && tail < children.size() && is_exactly<BatchNorm2d>(*children[tail].second)) {
    const auto& bn = static_cast<const BatchNorm2d&>(*children[tail].second);
    if (bn.num_features() == static_cast<const Conv2d&>(first).out_channels()) {
      norm = std::make_shared<FusedBatchNorm2d>(bn, std::vector<std::shared_ptr<Activation>>{}, true);
      norm->train(bn.is_training());
      ++tail;
    }
  }
  std::vector<std::shared_ptr<Activation>> activations = activations_from(children, tail);
  const size_t length = tail - i + activations.size();
  if (length < 2) return 0;
  std::shared_ptr<Module> head;
  if (is_exactly<Conv2d>(first)) {
    head = std::make_shared<FusedConv2d>(static_cast<const Conv2d&>(first), norm, activations);
  } else if (is_exactly<Linear>(first)) {
    head = std::make_shared<FusedLinear>(static_cast<const Linear&>(first), activations);
  } else if (is_exactly<BatchNorm2d>(first)) {
    head = std::make_shared<FusedBatchNorm2d>(static_cast<const BatchNorm2d&>(first), activations, false);
  } else {
    return 0;
  }
  children[i].second = with_mode(head, first);
  if (norm) children[i + 1].second = norm;
  for (size_t k = tail; k < i + length; ++k) {
    children[k].second = with_mode(std::make_shared<Identity>(), *children[k].second);
  }
  return length;
}

// The children with every run fused; false when there was none.
bool fuse_runs(NamedModules& children) {
  bool changed = false;
  for (size_t i = 0; i < children.size(); ++i) {
    const size_t length = fuse_run(children, i);
    if (length == 0) continue;
    changed = true;
    i += length - 1;
  }
  return changed;
}

// Each Residual child whose last branch ends in a fused run becomes a FusedResidual.
bool fuse_residuals(NamedModules& children) {
  bool changed = false;
  for (auto& [name, child] : children) {
    if (!is_exactly<Residual>(*child)) continue;
    const auto& residual = static_cast<const Residual&>(*child);
    if (!fused_tail(residual)) continue;
    child = std::make_shared<FusedResidual>(residual);  // copies the mode; the children keep theirs
    changed = true;
  }
  return changed;
}

// Each MaxPool2d right before a Flatten writes a contiguous output, which the
// flatten views instead of copying a channels-last one.
bool pool_for_flatten(NamedModules& children) {
  bool changed = false;
  for (size_t i = 0; i + 1 < children.size(); ++i) {
    if (!is_exactly<MaxPool2d>(*children[i].second) || !is_exactly<Flatten>(*children[i + 1].second)) {
      continue;
    }
    const auto& pool = static_cast<const MaxPool2d&>(*children[i].second);
    if (pool.options().output_format == MemoryFormat::Contiguous) continue;
    MaxPool2dOptions options = pool.options();
    options.output_format = MemoryFormat::Contiguous;
    children[i].second = with_mode(std::make_shared<MaxPool2d>(pool.kernel_size(), options), pool);
    changed = true;
  }
  return changed;
}

// A Sequential is rebuilt with the same child names ("0", "1", ...) and assigned in place.
void fuse_sequential(Sequential& sequential) {
  NamedModules children = sequential.named_children();
  const bool runs = fuse_runs(children);
  const bool residuals = fuse_residuals(children);
  const bool pools = pool_for_flatten(children);
  if (!runs && !residuals && !pools) return;
  Sequential rebuilt;
  rebuilt.train(sequential.is_training());  // before any child: sets only its own mode
  for (auto& [name, child] : children) rebuilt.push_back(child);
  sequential = std::move(rebuilt);
}

}  // namespace

// Children first: a Residual matches only once its branches' runs are fused.
void fuse(Module& model) {
  for (const std::shared_ptr<Module>& child : model.children()) fuse(*child);
  if (auto* sequential = dynamic_cast<Sequential*>(&model)) fuse_sequential(*sequential);
}

}  // namespace loom::nn
