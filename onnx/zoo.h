// File: onnx/zoo.h
// Exporting a model of the zoo's registry (models/registry.h) from its weights:
// what the trainers' --export-onnx and the export tool (examples/onnx) share.
//
//   StateDict weights = onnx::load_weights("run.ckpt");  // a training checkpoint or a state_dict
//   onnx::export_zoo_model("resnet20", weights, "resnet20.onnx");
//
// N batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/state_dict.h"
#include "onnx/export.h"

namespace loom::onnx {

// The model's weights in a file: the model section of a training checkpoint
// (core/checkpoint.h, what the trainers' --save writes) or a safetensors
// state_dict (core/safetensors.h), on the CPU. IoError for anything else.
StateDict load_weights(const std::string& path);

struct ZooExport {
  std::shared_ptr<nn::Module> model;  // the registry's model with the weights, on the CPU, in evaluation mode
  Tensor input;                       // the example batch it was traced on
  ExportSummary summary;
};

// Builds the registry's model `name` (ValueError listing the names for an
// unknown one), loads `weights` (every name must match; empty: the builder's
// own initial weights) and exports it on the CPU, traced on `batch` samples
// of the row's input shape drawn from a generator seeded with `seed`.
// `max_image_size` (0: none) caps the images' height and width, smaller ones
// keep their own: the ImageNet models run at 64 x 64 (their pools are adaptive)
// at a twelfth of the work, and the file then takes 64 x 64 images.
struct ZooExportOptions {
  int64_t batch = 1;
  int64_t max_image_size = 0;
  uint64_t seed = 0;
  ExportOptions onnx = {};
};
ZooExport export_zoo_model(const std::string& name, const StateDict& weights, const std::string& path,
                           const ZooExportOptions& options = {});

}  // namespace loom::onnx
