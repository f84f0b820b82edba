// File: tests/models/zoo_trace_test.cc
// Fusion by tracing on every zoo model as its builder writes it (custom modules,
// no nn::fuse call): the chains a traced forward finds include every block that
// nn::fuse makes of the same model, so a captured step fuses at least what the
// explicit rewrite would, whatever the module structure. Also the chains only
// tracing finds in custom modules (a basic block's add and ReLU, an inverted
// residual's projection + add), and the max pools before a flatten that both
// have write a contiguous output in a channels-last model.
// N batch, C channels, H, W.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/generator.h"
#include "core/ops/fusion_trace.h"
#include "core/ops/ops.h"
#include "core/trace.h"
#include "layers/nn.h"
#include "models/registry.h"
#include "tests/models/zoo_inputs.h"
#include "tests/testing.h"

namespace loom {
namespace {

using testing::small_input;
using BlockCounts = std::map<std::string, int>;  // Block::str() -> how many

fusion::TracedPlan traced_plan(nn::Module& net, const Tensor& x) {
  trace::Recorder recorder;
  Tensor y = net(x);
  return fusion::TracedPlan::from_trace(recorder.ops(), {y});
}

BlockCounts traced_blocks(nn::Module& net, const Tensor& x) {
  const fusion::TracedPlan plan = traced_plan(net, x);
  BlockCounts blocks;
  for (const fusion::TracedChain& chain : plan.chains()) ++blocks[chain.block];
  return blocks;
}

// The blocks of the model after nn::fuse: every head's, with a FusedResidual's
// block (its tail head's + add_residual) in place of its tail head's.
BlockCounts fused_blocks(nn::Module& net) {
  nn::fuse(net);
  BlockCounts blocks;
  std::vector<std::string> residuals;
  for (const auto& [name, module] : net.named_modules()) {
    if (auto* residual = dynamic_cast<nn::FusedResidual*>(module.get())) {
      residuals.push_back(residual->block().str());
    } else if (auto* norm = dynamic_cast<nn::FusedBatchNorm2d*>(module.get()); norm && norm->absorbed()) {
      continue;  // part of its conv's block
    } else if (auto* head = dynamic_cast<nn::FusedHead*>(module.get())) {
      ++blocks[head->block().str()];
    }
  }
  for (const std::string& residual : residuals) {
    const std::string tail = residual.substr(0, residual.rfind(" -> add_residual"));
    REQUIRE_MESSAGE(blocks[tail] > 0, "no head for the residual block " << residual);
    --blocks[tail];
    ++blocks[residual];
  }
  return blocks;
}

std::string str(const BlockCounts& blocks) {
  std::ostringstream out;
  for (const auto& [block, n] : blocks) {
    if (n > 0) out << "\n  " << n << " x " << block;
  }
  return out.str();
}

// Takes `n` blocks that compute `block` from `traced`: the same block first, then
// blocks that extend it (a conv -> batch_norm that tracing ends with the
// residual add the model writes after it). How many it could not find.
int take(BlockCounts& traced, const std::string& block, int n) {
  const int exact = std::min(n, traced[block]);
  traced[block] -= exact;
  n -= exact;
  for (auto& [candidate, count] : traced) {
    if (!candidate.starts_with(block + " -> ")) continue;
    const int taken = std::min(n, count);
    count -= taken;
    n -= taken;
  }
  return n;
}

TEST_CASE("every zoo model, traced as written, finds every block nn::fuse makes of it") {
  for (const models::ZooModel& row : models::zoo()) {
    if (row.name == "vgg11_bn" || row.name == "vgg16_bn") continue;  // 133M and 138M parameters; their _cifar twins run
    CAPTURE(row.name);
    manual_seed(0);
    std::shared_ptr<nn::Module> written = row.build(row.num_classes);
    const Tensor x = randn(small_input(row, 2));
    const BlockCounts traced = traced_blocks(*written, x);
    const BlockCounts fused = fused_blocks(*written);
    // Longest first, so a short block never takes the extension a longer one needs.
    std::vector<std::pair<std::string, int>> wanted(fused.begin(), fused.end());
    std::ranges::sort(wanted, [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    BlockCounts unclaimed = traced;
    for (const auto& [block, n] : wanted) {
      CHECK_MESSAGE(take(unclaimed, block, n) == 0, "nn::fuse makes " << n << " x " << block << "; traced:"
                                                                      << str(traced));
    }
  }
}

TEST_CASE("tracing fuses the custom blocks nn::fuse cannot reach (resnet18_cifar, mobilenet_v2_cifar)") {
  manual_seed(0);
  const models::ZooModel& resnet = models::zoo_model("resnet18_cifar");
  std::shared_ptr<nn::Module> net = resnet.build(10);
  const BlockCounts traced = traced_blocks(*net, randn(small_input(resnet, 2)));
  // Eight BasicBlocks, each ending conv -> bn -> add -> relu; nn::fuse leaves their adds alone.
  CHECK(traced.at("conv2d(stride=1, padding=1) -> batch_norm -> add_residual -> relu") == 8);
  CHECK(traced.at("conv2d(stride=1, padding=1) -> batch_norm -> relu") == 6);
  const BlockCounts fused = fused_blocks(*net);
  CHECK(fused.count("conv2d(stride=1, padding=1) -> batch_norm -> add_residual -> relu") == 0);

  const models::ZooModel& mobilenet = models::zoo_model("mobilenet_v2_cifar");
  net = mobilenet.build(10);
  const BlockCounts blocks = traced_blocks(*net, randn(small_input(mobilenet, 2)));
  int with_residual = 0;
  for (const auto& [block, n] : blocks) {
    if (block.ends_with("batch_norm -> add_residual")) with_residual += n;
  }
  CHECK(with_residual == 10);  // the inverted residuals of stride 1 with equal widths: 1 + 2 + 3 + 2 + 2
}

TEST_CASE("every zoo model, channels-last and traced as written, writes contiguous the pools nn::fuse does") {
  int pools = 0;
  for (const models::ZooModel& row : models::zoo()) {
    if (row.name == "vgg11_bn" || row.name == "vgg16_bn") continue;  // as above
    CAPTURE(row.name);
    manual_seed(0);
    std::shared_ptr<nn::Module> net = row.build(row.num_classes);
    net->to(MemoryFormat::ChannelsLast);
    const Shape sizes = small_input(row, 2);
    const Tensor x = randn(sizes).contiguous(sizes.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
    const fusion::TracedPlan plan = traced_plan(*net, x);
    nn::fuse(*net);
    size_t contiguous = 0;
    for (const auto& [name, module] : net->named_modules()) {
      const auto* pool = dynamic_cast<const nn::MaxPool2d*>(module.get());
      if (pool != nullptr && pool->options().output_format == MemoryFormat::Contiguous) ++contiguous;
    }
    CHECK(plan.contiguous_pools().size() == contiguous);
    pools += static_cast<int>(contiguous);
  }
  CHECK(pools >= 2);  // lenet5's and mnist_net's
}

}  // namespace
}  // namespace loom
