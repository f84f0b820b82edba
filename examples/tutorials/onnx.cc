// File: examples/tutorials/onnx.cc
// docs/onnx.md: a model written as your own nn::Module, trained a few steps on
// the CPU, exported to ONNX (opset 17) with a symbolic batch, and an example
// batch with Loom's outputs saved beside it, which onnx_runtime.py feeds to
// ONNX Runtime and compares; then what the exporter refuses, and why.
//
//   bazel run //examples/tutorials:onnx -- SCRATCH_DIR
//
// N batch.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "core/ops/ops.h"
#include "core/serialize.h"
#include "layers/nn.h"
#include "onnx/export.h"
#include "optim/adam.h"

using namespace loom;

class Net : public nn::Module {
 public:
  Net() {
    conv_ = register_module("conv", nn::Conv2d(1, 8, 3, {.padding = 1}));
    bn_ = register_module("bn", nn::BatchNorm2d(8));
    fc_ = register_module("fc", nn::Linear(8 * 7 * 7, 10));
  }

  Tensor forward(const Tensor& x) override {                  // x (N, 1, 28, 28)
    Tensor h = relu(bn_->forward(conv_->forward(x)));         // (N, 8, 28, 28)
    h = max_pool2d(h, 4);                                     // (N, 8, 7, 7)
    return fc_->forward(h.flatten(1));                        // (N, 10) logits
  }

 private:
  std::shared_ptr<nn::Conv2d> conv_;
  std::shared_ptr<nn::BatchNorm2d> bn_;
  std::shared_ptr<nn::Linear> fc_;
};

// A few Adam steps on random images, so the batch norm's running statistics
// are not their initial 0 and 1.
void train(Net& net) {
  Generator gen(7);
  Tensor x = randn({32, 1, 28, 28}, {}, &gen);
  Tensor y = randint(0, 10, {32}, {.dtype = DType::Int64}, &gen);
  optim::Adam opt(net.parameters(), {.lr = 0.01});
  for (int step = 0; step < 5; ++step) {
    Tensor loss = cross_entropy(net(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

// Training-mode dropout draws random numbers: no ONNX graph computes it.
class Noisy : public Net {
 public:
  Tensor forward(const Tensor& x) override { return dropout(Net::forward(x), 0.5, /*training=*/true); }
};

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: onnx SCRATCH_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  manual_seed(1);
  Net net;
  train(net);

  // Export: the forward in evaluation mode, traced on an example batch.
  Tensor example = randn({4, 1, 28, 28});
  onnx::ExportSummary summary = onnx::export_model(net, {example}, dir + "/net.onnx",
                                                   {.input_names = {"image"}, .output_names = {"logits"}});
  std::printf("net.onnx: %lld nodes, %lld initializers, input '%s', output '%s'\n",
              static_cast<long long>(summary.nodes), static_cast<long long>(summary.initializers),
              summary.input_names[0].c_str(), summary.output_names[0].c_str());

  // What ONNX Runtime should reproduce: Loom's logits for the same batch.
  NoGradGuard no_grad;
  net.eval();
  save_safetensors(dir + "/example.safetensors", {{"image", example}, {"logits", net(example)}});

  // Batch norm folded into the convolution: one node fewer, the same function.
  onnx::ExportSummary folded = onnx::export_model(net, {example}, dir + "/net_folded.onnx",
                                                  {.fold_batch_norm = true});
  std::printf("net_folded.onnx: %lld nodes\n", static_cast<long long>(folded.nodes));

  // What has no ONNX form is refused, naming the op and the module that ran it.
  Noisy noisy;
  try {
    onnx::export_model(noisy, {example}, dir + "/noisy.onnx");
  } catch (const onnx::ExportError& e) {
    std::printf("refused: %s\n", e.what());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "onnx: %s\n", e.what());
  return 1;
}
