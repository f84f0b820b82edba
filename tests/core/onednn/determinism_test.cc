// File: tests/core/onednn/determinism_test.cc
// One thread pool for all, and the same bits run to run: training steps of a
// small model (grouped, depthwise and plain convolutions, batch norm, ReLU,
// GELU, pooling, linear) on the oneDNN tier give bit-identical losses and
// weights when repeated from the same seed with the same thread count, with
// every plan built afresh as in a new process, for 1, 2 and 3 threads.
//
// N batch, C channels, H, W input.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/cpu_backend.h"
#include "core/onednn/plan.h"
#include "core/onednn/tier.h"
#include "core/ops/ops.h"
#include "core/parallel.h"
#include "layers/nn.h"
#include "optim/sgd.h"

namespace loom {
namespace {

nn::Sequential small_model() {
  return nn::Sequential(nn::Conv2d(3, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU(),
                        nn::MaxPool2d(2), nn::Conv2d(8, 16, 3, {.padding = 1, .groups = 2}),
                        nn::BatchNorm2d(16), nn::GELU(),
                        nn::Conv2d(16, 16, 3, {.padding = 1, .groups = 16}), nn::ReLU(),
                        nn::AdaptiveAvgPool2d({1, 1}), nn::Flatten(), nn::Linear(16, 10));
}

// The losses of three SGD steps and the weights after them, as raw bytes.
std::vector<std::vector<float>> train(int threads) {
  const int saved_threads = num_threads();
  set_num_threads(threads);
  onednn::clear_plans();  // every plan built again, as in a fresh process
  manual_seed(5);
  nn::Sequential model = small_model();
  model.to(MemoryFormat::ChannelsLast);
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  Generator gen(9);
  const Tensor x = randn({8, 3, 16, 16}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = randint(0, 10, {8}, {.dtype = DType::Int64}, &gen);
  std::vector<std::vector<float>> out;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    out.push_back(loss.detach().contiguous().to_vector<float>());
  }
  for (const Tensor& p : model.parameters()) out.push_back(p.detach().contiguous().to_vector<float>());
  set_num_threads(saved_threads);
  return out;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

TEST_CASE("a fixed thread count gives the same bits run to run on the oneDNN tier") {
  REQUIRE_MESSAGE(onednn::active(), "oneDNN did not load: install libdnnl2 (tools/setup.sh)");
  CpuBackendGuard tier(CpuBackend::Onednn);
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    const int64_t before = onednn::executions();
    const auto first = train(threads);
    CHECK(onednn::executions() - before > 30);  // the convolutions, norms and pools ran on oneDNN
    CHECK(same_bits(first, train(threads)));
  }
}

TEST_CASE("the thread count is the pool's for Loom's loops and oneDNN alike") {
  const int saved = num_threads();
  set_num_threads(3);
  CHECK(num_threads() == 3);
  std::vector<int> seen(3, 0);
  parallel_for_chunks(0, 3, 1, [&](int64_t chunk, int64_t, int64_t) { seen[chunk] = 1; });
  CHECK(seen == std::vector<int>{1, 1, 1});
  // The plans are keyed by the thread count: a change builds new ones.
  onednn::clear_plans();
  CpuBackendGuard tier(CpuBackend::Onednn);
  Generator gen(1);
  const Tensor x = randn({2, 4, 8, 8}, {}, &gen), w = randn({4, 4, 3, 3}, {}, &gen);
  conv2d(x, w);
  set_num_threads(2);
  conv2d(x, w);
  CHECK(onednn::plan_lines().size() == 2);
  set_num_threads(saved);
}

}  // namespace
}  // namespace loom
