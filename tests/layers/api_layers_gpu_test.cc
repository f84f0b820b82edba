// File: tests/layers/api_layers_gpu_test.cc
// ConvTranspose2d and Embedding as layers on the GPU: the same weights give
// the CPU's outputs and parameter gradients (inputs NCHW and channels-last),
// and a user-written module with typed children, ModuleList and a mask-based
// accuracy runs there unchanged.
//
// N batch, C channels, H, W, K out channels, V rows, D features.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/testing.h"

namespace loom {
namespace {

// Forward and backward of `cpu` and a copy of it on the GPU over the same input;
// checks the outputs and every parameter's gradient.
void check_layer(nn::Module& cpu, nn::Module& gpu, const Tensor& x, MemoryFormat format,
                 double tol, Generator& gen) {
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(testing::test_gpu());
  Tensor gx = x.to(testing::test_gpu());
  if (x.dim() == 4) gx = gx.contiguous(format);
  Tensor y = cpu(x), gy = gpu(gx);
  CHECK_CLOSE(gy.cpu(), y, tol, tol);
  Tensor dy = randn(y.sizes(), {}, &gen);
  y.backward(dy);
  gy.backward(dy.to(testing::test_gpu()));
  const auto cpu_params = cpu.named_parameters(), gpu_params = gpu.named_parameters();
  REQUIRE(cpu_params.size() == gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    CAPTURE(cpu_params[i].first);
    CHECK_CLOSE(gpu_params[i].second.grad().cpu(), cpu_params[i].second.grad(), tol, tol);
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("ConvTranspose2d on the GPU matches the CPU") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  Generator gen(71);
  for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    nn::ConvTranspose2d cpu(6, 4, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2,
                                      .generator = &gen});
    nn::ConvTranspose2d gpu(6, 4, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
    check_layer(cpu, gpu, randn({3, 6, 5, 7}, {}, &gen), f, 1e-4, gen);
  }
}

LOOM_GPU_TEST_CASE("Embedding on the GPU matches the CPU, repeated tokens included") {
  Generator gen(72);
  nn::Embedding cpu(11, 24, {.generator = &gen}), gpu(11, 24);
  check_layer(cpu, gpu, randint(0, 11, {8, 50}, {.dtype = DType::Int64}, &gen),
              MemoryFormat::Contiguous, 1e-5, gen);
}

namespace {

// A user's module: typed children, a ModuleList, functional ops between them.
class Decoder : public nn::Module {
 public:
  Decoder() {
    embed_ = register_module("embed", nn::Embedding(10, 16));
    up_ = register_module("up", nn::ConvTranspose2d(1, 4, 2, {.stride = 2}));
    heads_ = register_module("heads", nn::ModuleList(nn::Linear(4 * 4 * 4, 10)));
  }
  Tensor forward(const Tensor& tokens) override {
    Tensor image = embed_->forward(tokens).view({-1, 1, 4, 4});  // (N, 1, 4, 4)
    Tensor h = max_pool2d(relu(up_->forward(image)), 2);         // (N, 4, 4, 4)
    return (*heads_)[0](h.flatten(1));                             // (N, 10)
  }

 private:
  std::shared_ptr<nn::Embedding> embed_;
  std::shared_ptr<nn::ConvTranspose2d> up_;
  std::shared_ptr<nn::ModuleList> heads_;
};

// 20 plain SGD steps on tokens 0..9 labelled by themselves; returns the final logits.
Tensor train_decoder(Decoder& net, Device device) {
  const Tensor tokens = arange(int64_t{10}, {.dtype = DType::Int64, .device = device});
  for (int step = 0; step < 20; ++step) {
    Tensor loss = cross_entropy(net(tokens), tokens);
    net.zero_grad();
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& p : net.parameters()) sub_(p, p.grad(), 0.1);
  }
  return net(tokens);
}

}  // namespace

LOOM_GPU_TEST_CASE("a user-written module trains on the GPU as on the CPU") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  manual_seed(3);
  Decoder cpu;
  Decoder gpu;
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(testing::test_gpu());
  const Tensor expected = train_decoder(cpu, Device::cpu());
  const Tensor logits = train_decoder(gpu, testing::test_gpu());
  CHECK_CLOSE(logits.cpu(), expected, 1e-3, 1e-3);
  const Tensor labels = arange(int64_t{10}, {.dtype = DType::Int64});
  CHECK((logits.argmax(1).cpu() == labels).sum().item() ==
        (expected.argmax(1) == labels).sum().item());
  CHECK(gpu.type_name() == "Decoder");
}

}  // namespace loom
