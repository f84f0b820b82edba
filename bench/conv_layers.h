// File: bench/conv_layers.h
// Each distinct convolution of a zoo model, timed alone in Loom: its forward, and its
// forward with both gradients, each replayed from a CUDA graph so that only the GPU's
// time counts (the steady clock on the CPU, run eagerly). The list comes from the
// model's traced forward (batch 1, evaluation mode, the batch dim set to the batch
// asked for); bench/conv_layers_torch.py reads the JSON lines the binary writes, times
// the same convolutions in PyTorch in the same way and prints both side by side, per
// layer and summed over the model (each layer times its uses). Which convolutions of a
// step are slower than PyTorch's is then one call's answer, e.g. MobileNetV2's
// depthwise ones:
//
//   conv_layers --model mobilenet_v2_cifar --batch 128 --precision bf16 --depthwise --json dw.jsonl
//   python3 bench/conv_layers_torch.py dw.jsonl
//
// Only conv2d calls are listed: transposed convolutions (the U-Net's upsampling)
// and linear layers are not.
//
// N batch, C channels in, K out, H, W.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/ops/conv.h"
#include "core/shape.h"

namespace loom::bench {

extern const char* const kConvLayersUsage;

struct ConvLayersOptions {
  std::string model;
  int64_t batch = 128;
  std::string precision = "tf32";  // tf32, strict (no TF32) or bf16 (bfloat16 operands)
  std::string layout = "nhwc";     // nhwc or nchw
  bool depthwise = false;          // only the depthwise convolutions
  std::string module;              // "" or the one module whose convolution is timed
  bool split = false;              // also each gradient alone (dgrad_ms, wgrad_ms)
  bool plans = false;              // print the cuDNN plan table (engines, knobs) at the end
  int replays = 50;                // per timed repeat
  int repeats = 5;                 // the median is kept
  Device device = Device::cpu();
  std::string json;  // "" or a file each convolution's JSON line is appended to
};

// The binary's flags (kConvLayersUsage); ValueError naming the flag for a bad one.
ConvLayersOptions parse_conv_layers_flags(int argc, char** argv);

// One distinct convolution of a model and how often its forward runs it.
struct ConvLayer {
  Shape x, weight;  // x with the batch dim set
  bool bias = false;
  Conv2dOptions options;
  int64_t uses = 0;
  std::string module;  // the first module that runs it

  bool depthwise() const { return options.groups > 1 && options.groups == x[1] && weight[1] == 1; }
};

// The zoo model's conv2d calls in the order its forward first makes them, one entry per distinct call.
std::vector<ConvLayer> model_convs(const std::string& model, int64_t batch);

struct LayerTimes {
  double forward_ms = 0;
  double with_gradients_ms = 0;  // forward, dx and the weight's (and bias's) gradient
  // With options.split (else absent): the forward with dx alone, and with the weight's
  // (and bias's) gradient alone, which tells the two gradients' kernels apart.
  std::optional<double> dgrad_ms, wgrad_ms;
};

// The layer's operands in the options' dtype, layout and device, its plans built and
// settled (lazy mode's background plans swapped in, as a step boundary does), then timed.
LayerTimes time_layer(const ConvLayer& layer, const ConvLayersOptions& options);

// One JSON object (no newline): the layer, the options it ran under and its times.
std::string to_json(const ConvLayer& layer, const LayerTimes& times, const ConvLayersOptions& options);

// Times every layer (the depthwise ones with options.depthwise, the one module's with
// options.module; a module that runs no convolution is a ValueError), prints a line each
// and the per-step sums, appends the JSON lines.
void run_conv_layers(const ConvLayersOptions& options);

}  // namespace loom::bench
