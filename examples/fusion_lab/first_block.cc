// File: examples/fusion_lab/first_block.cc
// docs/fusion.md, step by step: declare a fused block, run it and get
// gradients, check it against its one-by-one evaluation, write a chain of your
// own, fuse a model, and read the fusion report. Runs on the GPU when one is
// usable and on the CPU otherwise (where blocks run op by op and the report
// says that nothing ran on a GPU).
//
//   bazel run //examples/fusion_lab:first_block
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "core/ops/fusion.h"
#include "core/ops/fusion_report.h"
#include "core/ops/ops.h"
#include "layers/fused.h"
#include "layers/models.h"

using namespace loom;

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

double max_difference(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.cpu().to_vector<float>(), y = b.cpu().to_vector<float>();
  double largest = 0;
  for (size_t i = 0; i < x.size(); ++i) largest = std::max(largest, std::fabs(double(x[i]) - y[i]));
  return largest;
}

Tensor leaf_copy(const Tensor& t) { return t.detach().clone().requires_grad_(); }

void run(Device device) {
  std::printf("device %s\n", device.str().c_str());
  // [snippet: declare]
  fusion::Block block = fusion::Block().conv2d({.padding = {1, 1}}).bias().gelu();
  std::printf("block: %s\n", block.str().c_str());
  std::printf("operands: %s\n", join(block.operand_names()).c_str());
  std::printf("pieces on a GPU: %s\n", block.pieces_str().c_str());
  // [end snippet]

  // [snippet: run]
  Generator gen(0);
  Tensor x = randn({8, 3, 16, 16}, {}, &gen).to(device);
  Tensor w = (randn({16, 3, 3, 3}, {}, &gen) * 0.2).to(device).requires_grad_();
  Tensor b = zeros({16}).to(device).requires_grad_();
  Tensor y = block(x, {w, b});  // gelu(conv2d(x, w) + b), one cuDNN graph on a GPU
  mean(y).backward();           // w.grad() and b.grad() as the unfused ops would give
  std::printf("y %s, w.grad() %s\n", shape_str(y.sizes()).c_str(), shape_str(w.grad().sizes()).c_str());
  // [end snippet]

  // [snippet: check]
  Tensor w2 = leaf_copy(w), b2 = leaf_copy(b);
  Tensor reference = block.forward_unfused(x, {w2, b2});  // one public op after another
  mean(reference).backward();
  std::printf("fused vs one by one: output %.1e, weight gradient %.1e\n", max_difference(y, reference),
              max_difference(w.grad(), w2.grad()));
  // [end snippet]

  // [snippet: chain]
  // gelu(scale * conv(x) + shift) + skip: scale and shift are per-channel (16) tensors.
  fusion::Block chain = fusion::Block().conv2d({.padding = {1, 1}}).scale_bias().gelu().add_residual();
  Tensor scale = ones({16}).to(device), shift = zeros({16}).to(device);
  Tensor skip = randn({8, 16, 16, 16}, {}, &gen).to(device);
  Tensor z = chain(x, {w, scale, shift, skip});
  std::printf("chain: %s -> %s\n", chain.str().c_str(), shape_str(z.sizes()).c_str());
  // [end snippet]

  // [snippet: model]
  nn::Sequential net = nn::mnist_net();
  nn::fuse(net);  // same parameters, same state_dict names; runs of layers become blocks
  net.to(device);
  std::cout << net[0].type_name() << " runs " << net.at<nn::FusedConv2d>(0).block().str() << "\n";
  Tensor logits = net(randn({4, 1, 28, 28}, {}, &gen).to(device));
  std::printf("logits %s\n", shape_str(logits.sizes()).c_str());
  // [end snippet]

  // [snippet: report]
  std::cout << fusion::report({.measure = device.is_cuda(), .iterations = 10});
  // [end snippet]
}

}  // namespace

int main() {
  try {
    run(cuda_available() ? Device::cuda() : Device::cpu());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "first_block: %s\n", e.what());
    return 1;
  }
}
