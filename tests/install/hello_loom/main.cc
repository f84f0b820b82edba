// File: tests/install/hello_loom/main.cc
// A program outside Loom's Bazel build, compiled against an installed Loom
// (tests/install/run.sh builds it with pkg-config and with CMake): a small
// classifier on random data, a few SGD steps on the CPU, the loss after each.
#include <cstdio>
#include <exception>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/sgd.h"

int main() {
  try {
    using namespace loom;
    Generator gen(0);
    Tensor x = randn({32, 4}, {}, &gen);                            // 32 samples, 4 features
    Tensor y = randint(0, 3, {32}, {.dtype = DType::Int64}, &gen);  // 3 classes
    nn::Sequential net(nn::Linear(4, 16, {.generator = &gen}), nn::ReLU(),
                       nn::Linear(16, 3, {.generator = &gen}));
    optim::SGD opt(net.parameters(), {.lr = 0.5});
    for (int step = 1; step <= 3; ++step) {
      Tensor loss = cross_entropy(net(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      std::printf("step %d loss %.6f\n", step, loss.item());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hello_loom: %s\n", e.what());
    return 1;
  }
}
