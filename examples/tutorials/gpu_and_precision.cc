// File: examples/tutorials/gpu_and_precision.cc
// docs/gpu_and_precision.md: choosing a device, channels-last memory, the
// numerics policies (tf32, strict fp32, bf16 autocast) and --explain. Runs on
// the GPU when one is usable and on the CPU otherwise (where the policies
// change nothing: the CPU computes in the tensors' own precision).
//
//   bazel run //examples/tutorials:gpu_and_precision -- [--explain]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "core/step_boundary.h"

using namespace loom;

// d loss / d weight of a 3x3 convolution, on `device`, with x in `format`.
Tensor conv_weight_grad(Device device, MemoryFormat format) {
  Generator gen(0);
  Tensor x = randn({8, 3, 16, 16}, {}, &gen).to(device).contiguous(format);
  Tensor w = randn({16, 3, 3, 3}, {}, &gen).to(device);
  w.requires_grad_();
  Tensor loss = mean(relu(conv2d(x, w, Tensor(), {.padding = {1, 1}})));
  loss.backward();
  return w.grad().cpu();
}

double max_difference(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double largest = 0;
  for (size_t i = 0; i < x.size(); ++i) largest = std::max(largest, std::fabs(double(x[i]) - y[i]));
  return largest;
}

int main(int argc, char** argv) try {
  bool explain = argc == 2 && std::strcmp(argv[1], "--explain") == 0;
  Device device = cuda_available() ? Device::cuda() : Device::cpu();
  std::printf("device %s\n", device.str().c_str());

  // Channels-last (NHWC) memory: the same tensor, the layout tensor cores prefer.
  Tensor nchw = conv_weight_grad(device, MemoryFormat::Contiguous);
  Tensor nhwc = conv_weight_grad(device, MemoryFormat::ChannelsLast);
  std::printf("channels-last vs NCHW gradient: max difference %.2e\n", max_difference(nchw, nhwc));

  // The default policy is tf32; strict fp32 takes no TF32 engine and no
  // down-conversion, and deterministic takes no engine cuDNN marks otherwise.
  std::printf("default policy %s\n", std::string(precision_name(numerics_policy().precision)).c_str());
  {
    NumericsGuard strict({.precision = Precision::StrictFp32, .deterministic = true});
    Tensor strict_grad = conv_weight_grad(device, MemoryFormat::ChannelsLast);
    std::printf("under %s: max difference to the default %.2e\n",
                std::string(precision_name(numerics_policy().precision)).c_str(),
                max_difference(strict_grad, nhwc));
  }

  // bf16 mixed precision: conv2d, linear and matmul take bf16 operands on the
  // GPU; parameters and their gradients stay fp32.
  if (device.is_cuda()) {
    AutocastGuard autocast(DType::BFloat16);
    Tensor bf16_grad = conv_weight_grad(device, MemoryFormat::ChannelsLast);
    std::printf("bf16 autocast: max difference to tf32 %.2e\n", max_difference(bf16_grad, nhwc));
  }

  // Every cuDNN plan this process chose: engine, notes, workspace, hits.
  if (explain && !device.is_cuda()) std::printf("--explain: no cuDNN plans, nothing ran on a GPU\n");
  if (explain && device.is_cuda()) std::printf("%s", plan_report().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gpu_and_precision: %s\n", e.what());
  return 1;
}
