// File: examples/tutorials/quick_start.cc
// docs/quick_start.md: tensors, autograd, a model, a training loop and its
// accuracy, on the CPU in a second.
//
//   bazel run //examples/tutorials:quick_start
#include <cstdio>
#include <exception>
#include <vector>

#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/adam.h"

using namespace loom;

// The fraction of rows of `logits` (N, K) whose largest entry is at `labels` (N).
double accuracy(const Tensor& logits, const Tensor& labels) {
  std::vector<int64_t> predicted = argmax(logits, 1).to_vector<int64_t>();
  std::vector<int64_t> expected = labels.to_vector<int64_t>();
  int64_t right = 0;
  for (size_t i = 0; i < expected.size(); ++i) right += predicted[i] == expected[i];
  return static_cast<double>(right) / static_cast<double>(expected.size());
}

int main() try {
  // 1. Tensors and autograd: d/dw mean((x w)^2).
  Generator gen(0);
  Tensor x = randn({4, 3}, {}, &gen);
  Tensor w = randn({3, 2}, {.requires_grad = true}, &gen);
  Tensor loss = mean(matmul(x, w) * matmul(x, w));
  loss.backward();
  std::printf("w.grad() has shape (%lld, %lld)\n", static_cast<long long>(w.grad().size(0)),
              static_cast<long long>(w.grad().size(1)));

  // 2. Data: 256 points in 2-D, labelled by the quadrant they fall in.
  Tensor points = randn({256, 2}, {}, &gen);
  std::vector<float> xy = points.to_vector<float>();
  std::vector<double> quadrant(256);
  for (size_t i = 0; i < quadrant.size(); ++i) quadrant[i] = 2 * (xy[2 * i] > 0) + (xy[2 * i + 1] > 0);
  Tensor labels = tensor(quadrant, {256}, {.dtype = DType::Int64});

  // 3. A model, an optimizer and the training loop.
  nn::Sequential net(nn::Linear(2, 32, {.generator = &gen}), nn::ReLU(),
                     nn::Linear(32, 4, {.generator = &gen}));
  optim::Adam opt(net.parameters(), {.lr = 0.05});
  std::printf("before training: accuracy %.2f\n", accuracy(net(points), labels));
  for (int step = 1; step <= 100; ++step) {
    Tensor step_loss = cross_entropy(net(points), labels);
    opt.zero_grad();
    step_loss.backward();
    opt.step();
    if (step % 25 == 0) std::printf("step %d loss %.4f\n", step, step_loss.item());
  }
  std::printf("after training: accuracy %.2f\n", accuracy(net(points), labels));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "quick_start: %s\n", e.what());
  return 1;
}
