// File: tests/core/ops/fusion_trace_nets.h
// Networks written as users write them, for the fusion-by-tracing tests: one
// drawn at random from a seed (conv2d, batch_norm, activation rows, residual
// and broadcast adds, in random orders, with uses that must break a chain),
// and a ResNet basic block with a projection shortcut.
//
// N batch, C channels, H, W.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "core/kernel/activation.h"
#include "core/tensor.h"
#include "layers/nn.h"

namespace loom::testing {

// RandomNet's channels and the input's H = W it expects.
constexpr int64_t kChannels = 4;
constexpr int64_t kTraceSize = 4;

// One step of a RandomNet's forward, drawn once.
struct Segment {
  bool norm_only = false;  // bn -> activations, without a conv
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> norm;
  std::vector<std::pair<kernel::ActivationKind, std::vector<double>>> activations;
  int residual = 0;  // 0: none, 1: value + x, 2: x + value
  bool post_activation = false;
  bool break_after_conv = false;  // the conv's output is used twice: the chain must stop there
  bool broadcast_add = false;     // + a (1, C, 1, 1) parameter at the end
  Tensor channel_offset;
};

// Input (N, kChannels, kTraceSize, kTraceSize) -> (N, 3); float32 parameters
// until moved. The same seed builds the same structure and weights. Half the
// seeds put a max_pool2d (window 2 or 3, stride 2) before the flatten, which
// tracing runs with a contiguous output when the input is channels-last.
class RandomNet : public nn::Module {
 public:
  explicit RandomNet(uint64_t seed);
  Tensor forward(const Tensor& x) override;
  // Chains the structure guarantees (a head followed by at least one step, not broken).
  int guaranteed_chains() const;
  bool pools_before_flatten() const { return pool_window_ != 0; }

 private:
  Segment draw(std::mt19937_64& rng, int i);
  Tensor run(const Segment& s, const Tensor& x) const;

  std::vector<Segment> segments_;
  int64_t pool_window_ = 0;  // 0: no pool before the flatten
  std::shared_ptr<nn::Linear> head_, classifier_;
  std::pair<kernel::ActivationKind, std::vector<double>> head_activation_;
};

// (N, 3, H, W) -> (N, 4, H / 2, W / 2): relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)),
// the ReLU module used twice.
class BasicBlock : public nn::Module {
 public:
  BasicBlock();
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::ReLU> relu_;
  std::shared_ptr<nn::Sequential> shortcut_;
};

}  // namespace loom::testing
