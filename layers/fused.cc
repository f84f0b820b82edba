// File: layers/fused.cc
// The fused layers' forwards and nn::fuse's in-place rewrite of Sequentials.
// N batch, C channels, H, W.
#include "layers/fused.h"

#include <typeinfo>
#include <utility>

#include "core/error.h"
#include "core/ops/fused.h"
#include "layers/activation.h"
#include "layers/container.h"

namespace loom::nn {

Tensor FusedConv2dReLU::forward(const Tensor& x) {
  return conv2d_bias_relu(x, weight(), bias(),
                          {.stride = options().stride.array(),
                           .padding = options().padding.array(),
                           .dilation = options().dilation.array(),
                           .groups = options().groups});
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

namespace {

template <class M>
bool is_exactly(const Module& module) {
  return typeid(module) == typeid(M);
}

// The fused layer for `layer` followed by a ReLU; null when there is none.
std::shared_ptr<Module> fused_with_relu(const Module& layer) {
  if (is_exactly<Conv2d>(layer)) {
    return std::make_shared<FusedConv2dReLU>(static_cast<const Conv2d&>(layer));
  }
  if (is_exactly<BatchNorm2d>(layer)) {
    return std::make_shared<BatchNormReLU>(static_cast<const BatchNorm2d&>(layer));
  }
  if (is_exactly<Linear>(layer)) {
    return std::make_shared<LinearReLU>(static_cast<const Linear&>(layer));
  }
  return nullptr;
}

// A ReLU, as nn::ReLU or the generic nn::Activation of the ReLU row.
bool is_relu(const Module& module) {
  const auto* activation = dynamic_cast<const Activation*>(&module);
  return activation != nullptr && activation->kind() == ActivationKind::Relu;
}

// The children with every [layer, ReLU] pair fused; false when there was none.
bool fuse_pairs(NamedModules& children) {
  bool changed = false;
  for (size_t i = 0; i + 1 < children.size(); ++i) {
    const Module& next = *children[i + 1].second;
    std::shared_ptr<Module> fused = is_relu(next) ? fused_with_relu(*children[i].second) : nullptr;
    if (!fused) continue;
    auto identity = std::make_shared<Identity>();
    identity->train(next.is_training());
    children[i].second = std::move(fused);
    children[i + 1].second = std::move(identity);
    changed = true;
    ++i;
  }
  return changed;
}

// A Sequential is rebuilt with the same child names ("0", "1", ...) and assigned in place.
void fuse_sequential(Sequential& sequential) {
  NamedModules children = sequential.named_children();
  if (!fuse_pairs(children)) return;
  Sequential rebuilt;
  rebuilt.train(sequential.is_training());  // before any child: sets only its own mode
  for (auto& [name, child] : children) rebuilt.push_back(child);
  sequential = std::move(rebuilt);
}

}  // namespace

void fuse(Module& model) {
  if (auto* sequential = dynamic_cast<Sequential*>(&model)) fuse_sequential(*sequential);
  for (const std::shared_ptr<Module>& child : model.children()) fuse(*child);
}

}  // namespace loom::nn
