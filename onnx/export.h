// File: onnx/export.h
// ONNX export: a module's forward in evaluation mode as an ONNX model (opset
// 17), for ONNX Runtime, TensorRT, OpenVINO and the browser runtimes.
//
//   auto net = models::zoo_model("resnet18_cifar").build(10);
//   net->load_state_dict(load_safetensors("resnet18_cifar.safetensors"));
//   onnx::export_model(*net, {randn({1, 3, 32, 32})}, "resnet18_cifar.onnx");
//   // input "input" (batch, 3, 32, 32), output "output" (batch, 10)
//
// How. The forward runs twice under a trace (core/trace.h) with autocast and
// the GPU's fused graphs off: once on the example inputs, once on inputs of
// other values (and, for a dynamic batch, one sample more). The two traces
// must agree op for op: a forward whose ops depend on the values (control
// flow on a tensor's contents) has no single graph, and is refused. Integer
// attributes that differ between the runs are the batch size's (a reshape to
// (N, -1), ViT's class token expanded to N rows) and become computed shapes.
// Each traced op then maps to ONNX nodes (onnx/lower_ops.cc, one row per Loom
// op); parameters and buffers become initializers under their state_dict
// names; tensors made inside the forward without a traced op (zeros(...)) are
// constants, checked to be the same in both runs. Batch norm is
// BatchNormalization with the running statistics (or, with fold_batch_norm,
// folded into the convolution before it).
//
// Errors are ExportError naming the op and the module that ran it: an op with
// no ONNX form here (a loss, an in-place update, dropout in training mode), a
// batch norm without running statistics, values-dependent control flow.
//
// N batch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::onnx {

// Something in the traced forward that the exporter cannot express in ONNX.
class ExportError : public Error {
  using Error::Error;
};

inline constexpr int64_t kOpset = 17;

struct ExportOptions {
  // Graph input and output names; empty: "input" / "output" for one, else
  // "input0", "input1", ... and "output0", ...
  std::vector<std::string> input_names = {};
  std::vector<std::string> output_names = {};
  // Dim 0 of every input is the symbolic "batch" (and of every output whose
  // first dim follows it); false: the example inputs' sizes are fixed.
  bool dynamic_batch = true;
  // A conv2d whose only reader is an inference batch norm becomes one Conv
  // with the norm folded into its weights and bias (w * gamma / sqrt(var + eps),
  // (b - mean) * gamma / sqrt(var + eps) + beta).
  bool fold_batch_norm = false;
  std::string doc_string = {};  // the model's doc_string (a description for the reader)
};

// What was written.
struct ExportSummary {
  int64_t nodes = 0;
  int64_t initializers = 0;
  int64_t initializer_bytes = 0;
  int64_t file_bytes = 0;
  std::vector<std::string> input_names, output_names;
};

// The module's forward on several inputs giving several outputs, for modules
// whose forward is not the one-tensor nn::Module::forward.
using Forward = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Exports module(example_inputs[0]) to `path` (written atomically). The module
// is put in evaluation mode while it runs and its mode restored after; its
// inputs and weights may be on any one device, in float32 or float64.
ExportSummary export_model(nn::Module& module, const std::vector<Tensor>& example_inputs,
                           const std::string& path, const ExportOptions& options = {});
// The same for `forward` (which calls the module) on several inputs.
ExportSummary export_model(nn::Module& module, const Forward& forward, const std::vector<Tensor>& example_inputs,
                           const std::string& path, const ExportOptions& options = {});

}  // namespace loom::onnx
