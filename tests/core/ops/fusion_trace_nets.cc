// File: tests/core/ops/fusion_trace_nets.cc
// The fusion-by-tracing tests' networks.
#include "tests/core/ops/fusion_trace_nets.h"

#include <array>
#include <span>
#include <string>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "core/ops/pooling.h"

namespace loom::testing {

namespace {

using kernel::ActivationKind;
using Rng = std::mt19937_64;

uint64_t pick(Rng& rng, uint64_t n) { return rng() % n; }  // 0 .. n - 1
double uniform(Rng& rng) { return std::uniform_real_distribution<double>(0, 1)(rng); }

std::pair<ActivationKind, std::vector<double>> random_activation(Rng& rng) {
  const auto kinds = std::span(kernel::kActivationKinds);
  const ActivationKind kind = kinds[pick(rng, kinds.size())];
  const int count = kernel::parameter_count(kernel::activation_info(kind));
  std::vector<double> parameters;
  if (count == 1 && pick(rng, 2) == 0) parameters = {0.05 + 0.5 * uniform(rng)};
  if (count == 2 && pick(rng, 2) == 0) parameters = {-1.0 - uniform(rng), 0.5 + uniform(rng)};
  return {kind, parameters};
}

}  // namespace

RandomNet::RandomNet(uint64_t seed) {
  Rng rng(seed);
  manual_seed(seed);  // the layers' initial weights
  const int count = 2 + static_cast<int>(pick(rng, 3));
  for (int i = 0; i < count; ++i) segments_.push_back(draw(rng, i));
  if (pick(rng, 2) == 0) pool_window_ = 2 + static_cast<int64_t>(pick(rng, 2));
  const int64_t side = pool_window_ == 0 ? kTraceSize : (kTraceSize + 2 * (pool_window_ / 2) - pool_window_) / 2 + 1;
  head_ = register_module("head", nn::Linear(kChannels * side * side, 6, {.bias = pick(rng, 2) == 0}));
  head_activation_ = random_activation(rng);
  classifier_ = register_module("classifier", nn::Linear(6, 3));
}

Tensor RandomNet::forward(const Tensor& x) {
  Tensor h = x;
  for (const Segment& s : segments_) h = run(s, h);
  if (pool_window_ != 0) {
    h = max_pool2d(h, {.kernel_size = {pool_window_, pool_window_}, .stride = std::array<int64_t, 2>{2, 2},
                       .padding = {pool_window_ / 2, pool_window_ / 2}});
  }
  Tensor features = h.flatten(1);
  return (*classifier_)(activation((*head_)(features), head_activation_.first, head_activation_.second));
}

int RandomNet::guaranteed_chains() const {
  int n = 1;  // the head linear -> its activation
  for (const Segment& s : segments_) {
    const bool steps = s.norm || !s.activations.empty() || s.residual != 0 || s.broadcast_add;
    if (s.norm_only ? !s.activations.empty() : steps && !s.break_after_conv) ++n;
  }
  return n;
}

Segment RandomNet::draw(Rng& rng, int i) {
  Segment s;
  const std::string name = "seg" + std::to_string(i);
  s.norm_only = pick(rng, 5) == 0;
  if (!s.norm_only) {
    const bool bias = pick(rng, 2) == 0;
    const int64_t k = pick(rng, 2) == 0 ? 3 : 1;
    s.conv = register_module(name + "_conv", nn::Conv2d(kChannels, kChannels, k, {.padding = k / 2, .bias = bias}));
  }
  if (s.norm_only || pick(rng, 3) != 0) {
    s.norm = register_module(name + "_bn", nn::BatchNorm2d(kChannels));
    if (pick(rng, 3) == 0) s.norm->eval();
  }
  const int activations = static_cast<int>(pick(rng, 3));
  for (int a = 0; a < activations; ++a) s.activations.push_back(random_activation(rng));
  if (!s.norm_only) {
    s.residual = static_cast<int>(pick(rng, 3));
    s.post_activation = s.residual != 0 && pick(rng, 2) == 0;
    s.break_after_conv = pick(rng, 5) == 0;
    s.broadcast_add = pick(rng, 4) == 0;
  }
  if (s.broadcast_add) s.channel_offset = register_parameter(name + "_offset", randn({1, kChannels, 1, 1}));
  return s;
}

Tensor RandomNet::run(const Segment& s, const Tensor& x) const {
  Tensor v = s.norm_only ? x : (*s.conv)(x);
  const Tensor at_conv = v;
  if (s.norm) v = (*s.norm)(v);
  for (const auto& [kind, parameters] : s.activations) v = activation(v, kind, parameters);
  if (s.residual == 1) v = add(v, x);
  if (s.residual == 2) v = add(x, v);
  if (s.post_activation) v = relu(v);
  if (s.broadcast_add) v = add(v, s.channel_offset);
  if (s.break_after_conv) v = add(v, at_conv.mean());  // a second use of the conv's output
  return v;
}

BasicBlock::BasicBlock() {
  conv1_ = register_module("conv1", nn::Conv2d(3, 4, 3, {.stride = 2, .padding = 1, .bias = false}));
  bn1_ = register_module("bn1", nn::BatchNorm2d(4));
  relu_ = register_module("relu", nn::ReLU());
  conv2_ = register_module("conv2", nn::Conv2d(4, 4, 3, {.padding = 1, .bias = false}));
  bn2_ = register_module("bn2", nn::BatchNorm2d(4));
  shortcut_ = register_module(
      "shortcut", nn::Sequential(nn::Conv2d(3, 4, 1, {.stride = 2, .bias = false}), nn::BatchNorm2d(4)));
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*relu_)((*bn1_)((*conv1_)(x)));
  out = (*bn2_)((*conv2_)(out));
  return (*relu_)(add(out, (*shortcut_)(x)));
}

}  // namespace loom::testing
